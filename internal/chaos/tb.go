package chaos

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// runTB lets the lab (written for tests) run in a program: a fatal error
// prints and unwinds to Run, cleanups run at the end, last first.
type runTB struct {
	testing.TB // not set: calling anything else panics
	dir        string
	mu         sync.Mutex
	cleanups   []func()
	failed     bool
}

type fatal struct{}

func (t *runTB) Helper()                 {}
func (t *runTB) Name() string            { return "chaos" }
func (t *runTB) Failed() bool            { t.mu.Lock(); defer t.mu.Unlock(); return t.failed }
func (t *runTB) Logf(f string, a ...any) { fmt.Printf("    "+f+"\n", a...) }
func (t *runTB) Log(a ...any)            { fmt.Println(append([]any{"   "}, a...)...) }
func (t *runTB) Errorf(f string, a ...any) {
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
	fmt.Fprintf(os.Stderr, "chaos: "+f+"\n", a...)
}
func (t *runTB) Error(a ...any) { t.Errorf("%s", fmt.Sprint(a...)) }
func (t *runTB) Fatalf(f string, a ...any) {
	t.Errorf(f, a...)
	panic(fatal{})
}
func (t *runTB) Fatal(a ...any)           { t.Fatalf("%s", fmt.Sprint(a...)) }
func (t *runTB) Skipf(f string, a ...any) { t.Fatalf("cannot run: "+f, a...) }
func (t *runTB) Skip(a ...any)            { t.Fatalf("cannot run: %s", fmt.Sprint(a...)) }
func (t *runTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

// TempDir is a directory under the run's directory, kept for a
// post-mortem (the run's directory is removed only on success).
func (t *runTB) TempDir() string {
	dir, err := os.MkdirTemp(t.dir, "lab-")
	if err != nil {
		t.Fatalf("%v", err)
	}
	return dir
}

func (t *runTB) cleanup() {
	for {
		t.mu.Lock()
		if len(t.cleanups) == 0 {
			t.mu.Unlock()
			return
		}
		f := t.cleanups[len(t.cleanups)-1]
		t.cleanups = t.cleanups[:len(t.cleanups)-1]
		t.mu.Unlock()
		func() {
			defer func() {
				if p := recover(); p != nil {
					if _, ok := p.(fatal); !ok {
						fmt.Fprintln(os.Stderr, "chaos: cleanup:", p)
					}
				}
			}()
			f()
		}()
	}
}

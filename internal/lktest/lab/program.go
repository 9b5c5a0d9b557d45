package lab

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// ProgramTB lets the lab, written for tests, run in a program (make demo,
// make chaos): Logf prints, Errorf prints to stderr and marks the run
// failed, Fatalf prints and panics with Fatal, which the program recovers
// where it unwinds to; RunCleanups runs the cleanups, last first.
type ProgramTB struct {
	testing.TB // not set: calling anything else panics

	// Prog names the program in messages ("demo", "chaos").
	Prog string
	// TempRoot is where TempDir makes its directories, kept for a
	// post-mortem; "" makes them in the system's temporary directory and
	// removes them at cleanup.
	TempRoot string

	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

// Fatal is what ProgramTB's Fatalf panics with.
type Fatal struct{}

func (t *ProgramTB) Helper()                 {}
func (t *ProgramTB) Name() string            { return t.Prog }
func (t *ProgramTB) Failed() bool            { t.mu.Lock(); defer t.mu.Unlock(); return t.failed }
func (t *ProgramTB) Logf(f string, a ...any) { fmt.Printf("    "+f+"\n", a...) }
func (t *ProgramTB) Log(a ...any)            { fmt.Println(append([]any{"   "}, a...)...) }
func (t *ProgramTB) Errorf(f string, a ...any) {
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
	fmt.Fprintf(os.Stderr, t.Prog+": "+f+"\n", a...)
}
func (t *ProgramTB) Error(a ...any) { t.Errorf("%s", fmt.Sprint(a...)) }
func (t *ProgramTB) Fatalf(f string, a ...any) {
	t.Errorf(f, a...)
	panic(Fatal{})
}
func (t *ProgramTB) Fatal(a ...any)           { t.Fatalf("%s", fmt.Sprint(a...)) }
func (t *ProgramTB) Skipf(f string, a ...any) { t.Fatalf("cannot run: "+f, a...) }
func (t *ProgramTB) Skip(a ...any)            { t.Fatalf("cannot run: %s", fmt.Sprint(a...)) }

// Cleanup registers f for RunCleanups.
func (t *ProgramTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

// TempDir makes a directory (see TempRoot).
func (t *ProgramTB) TempDir() string {
	root, pattern := t.TempRoot, "lab-"
	if root == "" {
		pattern = "leasekeeper-" + t.Prog + "-"
	}
	dir, err := os.MkdirTemp(root, pattern)
	if err != nil {
		t.Fatalf("%v", err)
	}
	if root == "" {
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	return dir
}

// RunCleanups runs the registered cleanups, last first; one that fails
// does not stop the others. Safe to call from several goroutines: each
// cleanup runs once.
func (t *ProgramTB) RunCleanups() {
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
					if _, ok := p.(Fatal); !ok {
						fmt.Fprintln(os.Stderr, t.Prog+": cleanup:", p)
					}
				}
			}()
			f()
		}()
	}
}

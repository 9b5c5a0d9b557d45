package outbox

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/agent/event"
)

// benchDir is where benchmark stores live: OUTBOX_BENCH_DIR to measure a
// particular disk (the state dir's), else the test's temporary directory.
func benchDir(b *testing.B) string {
	if d := os.Getenv("OUTBOX_BENCH_DIR"); d != "" {
		d, err := os.MkdirTemp(d, "outbox-bench-")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	return b.TempDir()
}

// BenchmarkAppend measures accepted (fsync'd) events per second through
// the group commit: b.N Append calls of batch events each, spread over
// appenders goroutines. With deliver, a deliverer peeks and acks as fast
// as it can, as with a region that keeps up; without, the queue grows.
//
//	go test -run '^$' -bench 'Append|Fsync|BoltBatch' -benchtime 3s ./agent/outbox
func BenchmarkAppend(b *testing.B) {
	for _, c := range []struct {
		appenders, batch int
		deliver          bool
	}{
		{1, 1, false}, {64, 1, false}, {64, 100, false}, {64, 1, true}, {256, 1, false},
	} {
		name := fmt.Sprintf("appenders=%d/batch=%d", c.appenders, c.batch)
		if c.deliver {
			name += "/deliver"
		}
		b.Run(name, func(b *testing.B) {
			s := openTest(b, filepath.Join(benchDir(b), "outbox.db"), 1<<40)
			evs := make([]event.Event, c.batch)
			for i := range evs {
				evs[i] = ev(i, event.Commit)
			}
			stop := make(chan struct{})
			var dwg sync.WaitGroup
			if c.deliver {
				dwg.Add(1)
				go func() {
					defer dwg.Done()
					for {
						select {
						case <-stop:
							return
						case <-s.Notify():
						}
						for {
							q, err := s.Peek(1000)
							if err != nil || len(q) == 0 {
								break
							}
							if err := s.Ack(seqs(q)...); err != nil {
								b.Error(err)
								return
							}
						}
					}
				}()
			}
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for g := 0; g < c.appenders; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if err := s.Append(context.Background(), evs...); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			close(stop)
			dwg.Wait()
			events := float64(b.N * c.batch)
			commits := s.metric(b, "leasekeeper_outbox_commit_seconds")
			b.ReportMetric(events/elapsed.Seconds(), "events/s")
			b.ReportMetric(events/commits, "events/commit")
		})
	}
}

// BenchmarkBoltBatch is the alternative to the store's writer goroutine:
// bbolt's own DB.Batch (which waits up to MaxBatchDelay, 10 ms, or
// MaxBatchSize calls before committing), doing the same work per event:
// read and bump the counter, put the record.
func BenchmarkBoltBatch(b *testing.B) {
	for _, appenders := range []int{1, 64} {
		b.Run(fmt.Sprintf("appenders=%d/batch=1", appenders), func(b *testing.B) {
			db, err := bbolt.Open(filepath.Join(benchDir(b), "batch.db"), 0o600, &bbolt.Options{FreelistType: bbolt.FreelistMapType})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			must(b, db.Update(func(tx *bbolt.Tx) error {
				if _, err := tx.CreateBucket(bucketQueue); err != nil {
					return err
				}
				_, err := tx.CreateBucket(bucketMeta)
				return err
			}))
			e := ev(1, event.Commit)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for g := 0; g < appenders; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						rec := encodeEvent(&e)
						err := db.Batch(func(tx *bbolt.Tx) error {
							meta := tx.Bucket(bucketMeta)
							seq := uint64(1)
							if v := meta.Get(keyNextSeq); v != nil {
								seq = binary.BigEndian.Uint64(v)
							}
							q := tx.Bucket(bucketQueue)
							q.FillPercent = 1
							if err := q.Put(seqKey(seq), rec); err != nil {
								return err
							}
							return meta.Put(keyNextSeq, seqKey(seq+1))
						})
						if err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
		})
	}
}

// BenchmarkFsync is what the disk allows: one 4 KiB write and fdatasync
// per op, ns/op being the latency of one durable write. overwrite rewrites
// blocks already allocated (bbolt reusing freed pages, with a deliverer
// acking); append extends the file (a growing queue: the filesystem must
// also journal the allocation). A bbolt commit is two of these, data
// pages then meta page, so it takes at least twice the latency.
func BenchmarkFsync(b *testing.B) {
	for _, mode := range []string{"overwrite", "append"} {
		b.Run(mode, func(b *testing.B) {
			f, err := os.Create(filepath.Join(benchDir(b), "fsync"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			buf := make([]byte, 4096)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				buf[0] = byte(i)
				off := int64(i) * 4096
				if mode == "overwrite" {
					off = int64(i%256) * 4096
				}
				if _, err := f.WriteAt(buf, off); err != nil {
					b.Fatal(err)
				}
				if err := fdatasync(f); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "fsyncs/s")
		})
	}
}

func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }

// BenchmarkCoalescePass is the cost of one compaction pass over a full
// queue (it runs inside a group commit, so appends wait for it):
// OUTBOX_BENCH_QUEUE events (default 100 000) over 5 000 IPs.
func BenchmarkCoalescePass(b *testing.B) {
	n := 100_000
	if v := os.Getenv("OUTBOX_BENCH_QUEUE"); v != "" {
		fmt.Sscan(v, &n)
	}
	s := openTest(b, filepath.Join(benchDir(b), "outbox.db"), 1<<40)
	evs := make([]event.Event, 0, 10_000)
	for i := 0; i < n; i++ {
		evs = append(evs, ev(i%5000, event.Commit))
		if len(evs) == cap(evs) || i == n-1 {
			must(b, s.Append(context.Background(), evs...))
			evs = evs[:0]
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t, err := s.begin()
		if err != nil {
			b.Fatal(err)
		}
		dropped, err := s.coalescePass(t)
		if err != nil || dropped != int64(n-5000) {
			b.Fatalf("pass dropped %d, %v", dropped, err)
		}
		t.tx.Rollback()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/queued-event")
}

package cli

import (
	"io"
	"os"
	"testing"
)

// BenchmarkPoolsFile runs `pools --json` on LEASEKEEPER_BENCH_LEASES and
// LEASEKEEPER_BENCH_CONF (scripts/bench-pools makes such files).
func BenchmarkPoolsFile(b *testing.B) {
	leases, conf := os.Getenv("LEASEKEEPER_BENCH_LEASES"), os.Getenv("LEASEKEEPER_BENCH_CONF")
	if leases == "" || conf == "" {
		b.Skip("LEASEKEEPER_BENCH_LEASES and LEASEKEEPER_BENCH_CONF not set")
	}
	for b.Loop() {
		root := New(Env{Stdout: io.Discard, Stderr: os.Stderr})
		root.SetArgs([]string{"pools", "--json", "--leases", leases, "--config", conf})
		if err := root.Execute(); err != nil {
			b.Fatal(err)
		}
	}
}

package parser

import (
	"bytes"
	"os"
	"testing"
)

// BenchmarkParseLeasesFile parses the file named by LEASEKEEPER_BENCH_LEASES
// (make bench generates one); it is skipped when unset.
func BenchmarkParseLeasesFile(b *testing.B) {
	path := os.Getenv("LEASEKEEPER_BENCH_LEASES")
	if path == "" {
		b.Skip("LEASEKEEPER_BENCH_LEASES not set")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseLeases(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseLeasesFileSerial(b *testing.B) {
	path := os.Getenv("LEASEKEEPER_BENCH_LEASES")
	if path == "" {
		b.Skip("LEASEKEEPER_BENCH_LEASES not set")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseLeasesWorkers(bytes.NewReader(data), 1); err != nil {
			b.Fatal(err)
		}
	}
}

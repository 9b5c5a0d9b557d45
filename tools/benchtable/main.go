// Command benchtable turns the output of make bench's runs into one
// table: every figure of issue 16's table, the median of its runs next to
// its target, and the same as JSON.
//
//	scripts/bench 2>&1 | benchtable -json bin/bench.json
//
// It reads two kinds of lines and ignores the rest: Go benchmark results
// ("BenchmarkX/sub-2  1  41.8 cpu-µs/event  …", one sample per metric
// per line) and lines the scripts print for figures no Go benchmark
// gives ("figure KEY VALUE").
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

func main() {
	jsonPath := flag.String("json", "", "also write the table as JSON to this file")
	flag.Parse()
	if err := run(os.Stdin, os.Stdout, *jsonPath, time.Now()); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer, jsonPath string, now time.Time) error {
	samples, err := parse(in)
	if err != nil {
		return err
	}
	t := build(rows(), samples, now)
	if err := t.write(out); err != nil {
		return err
	}
	if jsonPath == "" {
		return nil
	}
	return t.writeJSON(jsonPath)
}

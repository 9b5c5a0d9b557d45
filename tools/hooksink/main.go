// Command hooksink stands in for the leasekeeper agent's hook socket in
// benchmarks: it binds a unix datagram socket, reads datagrams as fast as
// they come, and on SIGINT or SIGTERM prints how many it received (and
// how many were not a JSON object with an "action") and exits.
//
//	hooksink -socket /run/leasekeeper/hook.sock
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	socket := flag.String("socket", "", "unix datagram socket to bind (required; removed on exit)")
	flag.Parse()
	if *socket == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: hooksink -socket PATH")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	n, bad, err := run(ctx, *socket)
	fmt.Printf("hooksink: received %d events (%d malformed)\n", n, bad)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hooksink:", err)
		os.Exit(1)
	}
}

// run reads datagrams from a socket bound at path until ctx ends.
func run(ctx context.Context, path string) (n, bad int, err error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, 0, err
	}
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return 0, 0, err
	}
	defer os.Remove(path)
	_ = c.SetReadBuffer(4 << 20)
	go func() {
		<-ctx.Done()
		c.Close()
	}()
	buf := make([]byte, 64<<10)
	var ev struct {
		Action string `json:"action"`
	}
	for {
		m, err := c.Read(buf)
		if err != nil {
			if ctx.Err() != nil {
				return n, bad, nil
			}
			return n, bad, err
		}
		n++
		ev.Action = ""
		if json.Unmarshal(buf[:m], &ev) != nil || ev.Action == "" {
			bad++
		}
	}
}

// Command regionstub serves a stand-in for the MAAS region's internal
// leases API over mutual TLS, for the demo and end-to-end tests. It
// behaves as MAAS does (see package internal/lktest/regionstub):
//
//	regionstub -cert-dir /tmp/stub            # https://127.0.0.1:5242/MAAS/a/v3internal/leases
//	regionstub -cert-dir D -version 3.7 -subnet 203.0.113.0/24=203.0.113.100-203.0.113.199
//	regionstub -cert-dir D -fail-503 60s -retry-after 5 -poison 203.0.113.7 -control 127.0.0.1:5243
//
// It writes ca.pem, agent.crt and agent.key into -cert-dir (or reuses
// those already there) for the agent's region.ca_file, cert_file and
// key_file; the server certificate names only "maas" (server_name). See
// package internal/lktest/regionstub for the fault modes and the -control API
// that changes them at run time.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/lktest/regionstub"
)

type flags struct {
	listen, certDir, version, control string
	subnets                           subnetFlags
	fail503, closeFor, delay          time.Duration
	retryAfter, poison                string
	poisonStatus                      int
	flaky                             float64
	seed                              uint64
}

// subnetFlags collects -subnet values; none means the stub's defaults.
type subnetFlags []regionstub.Subnet

func (s *subnetFlags) String() string { return fmt.Sprint(len(*s), " subnets") }

func (s *subnetFlags) Set(v string) error {
	sub, err := regionstub.ParseSubnet(v)
	if err == nil {
		*s = append(*s, sub)
	}
	return err
}

func main() {
	var f flags
	flag.StringVar(&f.listen, "listen", "127.0.0.1:5242", "address to serve HTTPS on (loopback unless you say otherwise)")
	flag.StringVar(&f.certDir, "cert-dir", "regionstub-certs", "directory for the CA, server and client PEM files (reused if present)")
	flag.StringVar(&f.version, "version", "", "MAAS version to behave as: 3.6, 3.7, 3.8 or later (default: the newest)")
	flag.Var(&f.subnets, "subnet", "a MAAS subnet, CIDR or CIDR=FIRST-LAST[+FIRST-LAST…] for its IP ranges (repeatable; default: the lab's ranges)")
	flag.StringVar(&f.control, "control", "", "serve the control API on this loopback address (e.g. 127.0.0.1:5243)")
	flag.DurationVar(&f.fail503, "fail-503", 0, "answer 503 for this long after start")
	flag.StringVar(&f.retryAfter, "retry-after", "", "Retry-After value sent with -fail-503")
	flag.DurationVar(&f.closeFor, "close-for", 0, "reset every connection for this long after start")
	flag.StringVar(&f.poison, "poison", "", "comma-separated IPs whose batches fail whatever the subnets say")
	flag.IntVar(&f.poisonStatus, "poison-status", http.StatusInternalServerError, "status for a poisoned batch")
	flag.DurationVar(&f.delay, "delay", 0, "delay every answer by this long")
	flag.Float64Var(&f.flaky, "flaky", 0, "fraction of requests failing at random (503, resets, lost answers)")
	flag.Uint64Var(&f.seed, "seed", 1, "seed for -flaky")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, f)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "regionstub:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, f flags) error {
	if f.control != "" {
		if err := loopback(f.control); err != nil {
			return fmt.Errorf("-control: %w", err)
		}
	}
	pki, files, err := regionstub.LoadOrCreatePKI(f.certDir)
	if err != nil {
		return err
	}
	opts := regionstub.Options{Addr: f.listen, PKI: pki, Version: f.version}
	if len(f.subnets) > 0 {
		opts.Subnets = f.subnets
	}
	s, err := regionstub.Start(opts)
	if err != nil {
		return err
	}
	defer s.Close()
	if f.fail503 > 0 {
		s.Unavailable(f.fail503, f.retryAfter)
	}
	if f.closeFor > 0 {
		s.CloseFor(f.closeFor)
	}
	if f.poison != "" {
		for _, ip := range strings.Split(f.poison, ",") {
			s.Poison(strings.TrimSpace(ip), f.poisonStatus)
		}
	}
	s.SetDelay(f.delay)
	if f.flaky > 0 {
		s.SetFlaky(f.flaky, f.seed)
	}
	fmt.Printf("region stub (MAAS %s) at %s\n[region]\nurl = %q\nserver_name = %q\nca_file = %q\ncert_file = %q\nkey_file = %q\n",
		s.Version(), s.URL(), s.URL(), regionstub.ServerName, files.CA, files.ClientCert, files.ClientKey)
	if f.control != "" {
		ln, err := net.Listen("tcp", f.control)
		if err != nil {
			return err
		}
		cs := &http.Server{Handler: s.ControlHandler(), ReadHeaderTimeout: 10 * time.Second}
		go cs.Serve(ln) //nolint:errcheck // ends with Close
		defer cs.Close()
		fmt.Printf("control API at http://%s\n", ln.Addr())
	}
	<-ctx.Done()
	fmt.Printf("accepted %d items in %d batches\n", s.Len(), len(s.Batches()))
	return nil
}

func loopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%s is not a loopback address", addr)
	}
	return nil
}

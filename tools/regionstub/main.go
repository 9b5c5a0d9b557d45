// Command regionstub serves a stand-in for the MAAS region's leases
// endpoint over TLS, for the demo and end-to-end tests:
//
//	regionstub -cert-dir /tmp/stub            # https://127.0.0.1:5443/MAAS/a/v3internal/leases
//	regionstub -cert-dir D -fail-503 60s -retry-after 5 -poison 203.0.113.7 -control 127.0.0.1:5444
//
// It writes ca.pem, client.pem and client-key.pem into -cert-dir (or
// reuses those already there) for the agent's region.ca_file, cert_file
// and key_file. See package internal/regionstub for the fault modes and
// the -control API that changes them at run time.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/regionstub"
)

type flags struct {
	listen, path, certDir, hosts, tokenFile, control string
	noClientCert                                     bool
	fail503, closeFor, delay                         time.Duration
	retryAfter, poison                               string
	poisonStatus                                     int
	flaky                                            float64
	seed                                             uint64
}

func main() {
	var f flags
	flag.StringVar(&f.listen, "listen", "127.0.0.1:5443", "address to serve HTTPS on (loopback unless you say otherwise)")
	flag.StringVar(&f.path, "path", regionstub.DefaultPath, "endpoint path")
	flag.StringVar(&f.certDir, "cert-dir", "regionstub-certs", "directory for the CA, server and client PEM files (reused if present)")
	flag.StringVar(&f.hosts, "hosts", "", "extra comma-separated names or addresses for the server certificate")
	flag.StringVar(&f.tokenFile, "token-file", "", "accept the bearer token in this file (created 0600 with a random token if missing)")
	flag.BoolVar(&f.noClientCert, "no-client-cert", false, "do not ask for client certificates (token only)")
	flag.StringVar(&f.control, "control", "", "serve the control API on this loopback address (e.g. 127.0.0.1:5444)")
	flag.DurationVar(&f.fail503, "fail-503", 0, "answer 503 for this long after start")
	flag.StringVar(&f.retryAfter, "retry-after", "", "Retry-After value sent with -fail-503")
	flag.DurationVar(&f.closeFor, "close-for", 0, "reset every connection for this long after start")
	flag.StringVar(&f.poison, "poison", "", "comma-separated IPs whose batches are refused")
	flag.IntVar(&f.poisonStatus, "poison-status", http.StatusNotFound, "status for a poisoned batch")
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
	var hosts []string
	if f.hosts != "" {
		hosts = strings.Split(f.hosts, ",")
	}
	pki, files, err := regionstub.LoadOrCreatePKI(f.certDir, hosts...)
	if err != nil {
		return err
	}
	opts := regionstub.Options{Addr: f.listen, Path: f.path, PKI: pki, NoClientCert: f.noClientCert}
	if f.tokenFile != "" {
		if opts.Token, err = token(f.tokenFile); err != nil {
			return err
		}
	}
	if opts.NoClientCert && opts.Token == "" {
		return errors.New("-no-client-cert needs -token-file: the stub would accept anyone")
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
	fmt.Printf("region stub at %s\nca_file = %q\ncert_file = %q\nkey_file = %q\n",
		s.URL(), files.CA, files.ClientCert, files.ClientKey)
	if f.tokenFile != "" {
		fmt.Printf("token_file = %q\n", f.tokenFile)
	}
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

// token reads the bearer token from path, making a random one if the
// file does not exist.
func token(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		buf := make([]byte, 24)
		rand.Read(buf)
		t := hex.EncodeToString(buf)
		return t, os.WriteFile(path, []byte(t+"\n"), 0o600)
	}
	if err != nil {
		return "", err
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("%s: empty token", path)
	}
	return t, nil
}

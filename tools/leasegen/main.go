// Command leasegen writes a synthetic dhcpd.leases and matching dhcpd.conf
// for benchmarks: leasegen -ips 100000 -versions 3 -maas -leases F -config F.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/leasekeeper/leasekeeper/internal/lktest/leasegen"
)

func main() {
	var o leasegen.Options
	flag.IntVar(&o.IPs, "ips", 100000, "distinct addresses")
	flag.IntVar(&o.Versions, "versions", 3, "appended blocks per address")
	flag.BoolVar(&o.MAAS, "maas", false, "carry MAAS's set and on-expiry/on-release statements")
	flag.BoolVar(&o.Failover, "failover", false, "declare a failover peer for the shared-network pools")
	leases := flag.String("leases", "dhcpd.leases", "leases file to write")
	config := flag.String("config", "dhcpd.conf", "dhcpd.conf to write")
	flag.Parse()
	if err := run(o, *leases, *config); err != nil {
		fmt.Fprintln(os.Stderr, "leasegen:", err)
		os.Exit(1)
	}
}

func run(o leasegen.Options, leases, config string) error {
	for _, f := range []struct {
		path  string
		write func(*os.File) error
	}{
		{leases, func(f *os.File) error { return leasegen.WriteLeases(f, o) }},
		{config, func(f *os.File) error { return leasegen.WriteConfig(f, o) }},
	} {
		out, err := os.Create(f.path)
		if err != nil {
			return err
		}
		if err := f.write(out); err != nil {
			out.Close()
			return err
		}
		if err := out.Close(); err != nil {
			return err
		}
	}
	return nil
}

package release

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// ParseNetworkd reads a systemd-networkd DHCPv4 lease file
// (/run/systemd/netif/leases/IFINDEX), which NetworkManager's internal
// client also writes (/var/lib/NetworkManager/internal-UUID-IFACE.lease):
//
//	# This is private data. Do not parse.
//	ADDRESS=203.0.113.10
//	NETMASK=255.255.255.0
//	SERVER_ADDRESS=203.0.113.1
//	T1=300
//	T2=525
//	LIFETIME=600
//	CLIENTID=ff5ac2b0e200020000ab11…   (hex, no separators)
//
// The keys read are ADDRESS (required), SERVER_ADDRESS, CLIENTID and
// LIFETIME (seconds); others are skipped. NetworkManager's nettools
// client writes ADDRESS alone, so Server may come back invalid. The
// file records no interface (it is the file's name) and no expiry
// (the file's time plus LIFETIME is: Lease.Expiry).
func ParseNetworkd(r io.Reader) (Lease, error) {
	var l Lease
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		key, val, ok := strings.Cut(line, "=")
		if !ok {
			return Lease{}, fmt.Errorf("line %d: want KEY=VALUE", n)
		}
		val = unquote(strings.TrimSpace(val))
		var err error
		switch strings.TrimSpace(key) {
		case "ADDRESS":
			l.Address, err = parseIPv4(val)
			l.Line = n
		case "SERVER_ADDRESS":
			l.Server, err = parseIPv4(val)
		case "CLIENTID":
			if val == "" {
				break
			}
			l.ClientID, err = hex.DecodeString(val)
			if err != nil {
				err = fmt.Errorf("%q is not hex", val)
			}
		case "LIFETIME":
			var s uint64
			s, err = strconv.ParseUint(val, 10, 32)
			if err != nil {
				err = fmt.Errorf("%q is not a number of seconds", val)
			}
			l.Lifetime = time.Duration(s) * time.Second
		}
		if err != nil {
			return Lease{}, fmt.Errorf("line %d: %s: %w", n, key, err)
		}
	}
	if err := sc.Err(); err != nil {
		return Lease{}, err
	}
	if !l.Address.IsValid() {
		return Lease{}, errors.New("no ADDRESS")
	}
	return l, nil
}

func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' && s[len(s)-1] == '"' || s[0] == '\'' && s[len(s)-1] == '\'') {
		return s[1 : len(s)-1]
	}
	return s
}

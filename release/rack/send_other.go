//go:build !linux

package rack

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"
)

func sendFrame(string, int, []byte) error {
	return errors.New("releasing on behalf of a client needs Linux packet sockets")
}

func askARP(context.Context, int, net.HardwareAddr, netip.Addr, time.Duration) (net.HardwareAddr, error) {
	return nil, errors.New("an ARP probe needs Linux packet sockets")
}

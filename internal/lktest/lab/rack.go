package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"time"
)

// Destroy makes the client vanish the way a force-deleted container
// does: dhclient dies by SIGKILL without a DHCPRELEASE (if it runs) and
// the client's namespace is deleted, taking eth0 and its veth peer on
// the bridge with it. It fails if the peer is still on the bridge a few
// seconds later (the kernel dismantles a namespace asynchronously).
//
// The lab's cleanup deletes every client namespace by name, so Destroy
// leaves an empty namespace of the same name behind (no interfaces, no
// processes) for it to delete.
func (c *Client) Destroy() error {
	var err error
	if kerr := c.Kill(); kerr != nil && !errors.Is(kerr, errStopped) {
		err = kerr
	}
	l := c.lab
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	if out, derr := exec.CommandContext(ctx, l.ip, "netns", "del", c.NS).CombinedOutput(); derr != nil {
		return errors.Join(err, fmt.Errorf("client %s: ip netns del %s: %v: %s", c.Name, c.NS, derr, bytes.TrimSpace(out)))
	}
	c.mu.Lock()
	c.addr = netip.Addr{}
	c.mu.Unlock()

	gone := false
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, lerr := exec.CommandContext(ctx, l.ip, "-n", l.NS, "link", "show", c.Peer).CombinedOutput(); lerr != nil {
			gone = true
			break
		}
	}
	if !gone {
		err = errors.Join(err, fmt.Errorf("client %s: %s still on the bridge 5s after its namespace was deleted", c.Name, c.Peer))
	}
	ns, aerr := l.addNetns(c.NS)
	switch {
	case aerr != nil:
		err = errors.Join(err, fmt.Errorf("client %s: placeholder namespace for the cleanup: %w", c.Name, aerr))
	case ns != c.NS:
		l.delNetns(ns)
		err = errors.Join(err, fmt.Errorf("client %s: placeholder namespace got the name %s, not %s", c.Name, ns, c.NS))
	}
	return err
}

package deliver

import (
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/outbox"
	"github.com/leasekeeper/leasekeeper/internal/lktest/regionstub"
)

// The real outbox satisfies Queue, with Depth for the logs.
var (
	_ Queue   = (*outbox.Store)(nil)
	_ depther = (*outbox.Store)(nil)
)

// TestRealOutbox runs the deliverer on the bbolt outbox against the stub
// over mTLS, failing 20 % of requests, with one poison event (an address
// in no subnet: 500), and restarts
// the agent half way (deliverer stopped, outbox closed and reopened, more
// events appended after the restart). Everything but the poison event
// reaches the region in queue order; the poison one is a dead letter in
// the outbox with the region's answer.
func TestRealOutbox(t *testing.T) {
	t.Parallel()
	// 203.0.113.99 is in no subnet of this region: MAAS fails any batch
	// holding it with 500.
	s, f := stub(t, regionstub.Options{Subnets: []regionstub.Subnet{regionstub.WholeSubnet("198.18.0.0/15")}})
	s.SetFlaky(0.2, 7)
	poison := event.Event{Action: event.Commit, Family: event.IPv4, MAC: "02:00:00:00:ff:ff",
		IP: netip.MustParseAddr("203.0.113.99"), Timestamp: 1, LeaseTime: 600, Hostname: "poison"}
	evs := events(3000, 150)
	first := slices.Insert(slices.Clone(evs[:2000]), 1234, poison)
	path := filepath.Join(t.TempDir(), "state", "outbox.db")
	ctx := ctxT(t, 25*time.Second)

	open := func() *outbox.Store {
		st, err := outbox.Open(path, outbox.Options{Logger: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := open()
	if err := st.Append(ctx, first...); err != nil {
		t.Fatal(err)
	}
	h := newDeliverer(t, fastConfig(s, f), st)
	stop := run(t, h.d)
	waitFor(t, 10*time.Second, "half of the events", func() bool { return s.Len() >= 1000 })
	stop()
	h.d.Close()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if s.Len() >= 2000 {
		t.Log("everything was delivered before the restart; the restart tested little")
	}

	st = open()
	defer st.Close()
	h = newDeliverer(t, fastConfig(s, f), st)
	run(t, h.d)
	if err := st.Append(ctx, evs[2000:]...); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the outbox to drain", func() bool { return st.Depth() == 0 && st.DeadLetterCount() == 1 })
	got, dups := received(t, s.Batches())
	checkOrder(t, items(evs), got)
	dl, err := st.DeadLetters()
	if err != nil {
		t.Fatal(err)
	}
	if len(dl) != 1 || dl[0].Event.IP != poison.IP || !strings.HasPrefix(dl[0].Reason, "HTTP 500: ") ||
		!strings.Contains(dl[0].Reason, regionstub.MsgInternalError) {
		t.Fatalf("dead letters %+v, want the poison event with the region's 500", dl)
	}
	t.Logf("%d requests, %d duplicate batches (answer lost); dead letter: %s", len(s.Requests()), dups, dl[0].Reason)
}

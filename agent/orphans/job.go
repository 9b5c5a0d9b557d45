package orphans

import (
	"encoding/json"
	"net/netip"
	"time"

	"go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/agent/outbox"
	"github.com/leasekeeper/leasekeeper/agent/reconcile"
	"github.com/leasekeeper/leasekeeper/internal/maasapi"
)

// Bucket is the jobs' bucket in the outbox file's key/value area.
const Bucket = "orphans"

// Job states.
const (
	StateWaiting      = "waiting"      // not tried yet
	StateUnconfigured = "unconfigured" // no [maas]: the region keeps it
	StateRetrying     = "retrying"     // the region did not answer; backing off
	StateBusy         = "busy"         // something answers ARP for it
	StateBlocked      = "blocked"      // it cannot be probed (not on a link of this rack)
	StateRefused      = "refused"      // the API key is refused or not an administrator's, or this host's clock is behind the region's
	StateUnreleasable = "unreleasable" // MAAS's release fails for its record (linked to several interfaces)
	StateUnconfirmed  = "unconfirmed"  // the region answered the release with success but still lists the record
	StateMisdirected  = "misdirected"  // maas.api_url does not lead to the region's API 2.0 (a redirect or a 404), or its TLS certificate is not trusted (maas.ca_file)
)

// states are every job state, in the order the metrics list them.
var states = []string{StateWaiting, StateUnconfigured, StateRetrying, StateBusy, StateBlocked, StateRefused, StateUnreleasable, StateUnconfirmed, StateMisdirected}

// Job is an address to free in the region.
type Job struct {
	IP       netip.Addr `json:"ip"`
	MAC      string     `json:"mac"`
	Ends     int64      `json:"ends"`  // the lease's end, Unix seconds
	Found    time.Time  `json:"found"` // when the reconciler handed it over
	State    string     `json:"state"`
	Reason   string     `json:"reason,omitempty"`
	Attempts int        `json:"attempts"`
	Next     time.Time  `json:"next"` // the next attempt; zero = at once
	Last     time.Time  `json:"last,omitzero"`
	Asked    time.Time  `json:"asked,omitzero"` // when the region's record was last read for it
}

// Sink is the reconciler's reconcile.OrphanSink for a Releaser.
type Sink struct{ r *Releaser }

// Put stores the orphans as new jobs in tx (a job already there for the
// address is replaced: the newer lease's is the one to free).
func (s Sink) Put(tx *bbolt.Tx, os []reconcile.Orphan, now time.Time) error {
	b, err := outbox.KVBucket(tx, Bucket)
	if err != nil {
		return err
	}
	for _, o := range os {
		j := Job{IP: o.IP, MAC: o.MAC, Ends: o.Ends, Found: now.UTC(), State: StateWaiting}
		if err := putJob(b, j); err != nil {
			return err
		}
	}
	return nil
}

// Wake tells the Releaser new jobs are on disk.
func (s Sink) Wake() {
	if s.r != nil {
		s.r.Wake()
	}
}

func putJob(b *bbolt.Bucket, j Job) error {
	v, err := json.Marshal(j)
	if err != nil {
		return err
	}
	return b.Put([]byte(j.IP.String()), v)
}

// getJob reads ip's job in b; ok is false when there is none (or it
// does not decode).
func getJob(b *bbolt.Bucket, ip netip.Addr) (j Job, ok bool) {
	v := b.Get([]byte(ip.String()))
	if v == nil || json.Unmarshal(v, &j) != nil || !j.IP.IsValid() {
		return Job{}, false
	}
	return j, true
}

// readJobs reads every job in b (nil: none).
func readJobs(b *bbolt.Bucket) (map[netip.Addr]Job, int) {
	out := map[netip.Addr]Job{}
	bad := 0
	if b == nil {
		return out, 0
	}
	b.ForEach(func(k, v []byte) error { //nolint:errcheck // fn returns nil
		var j Job
		if err := json.Unmarshal(v, &j); err != nil || !j.IP.IsValid() {
			bad++
			return nil
		}
		// A reason stored before the client left the key's secret out
		// of a wrong signature's 401 may hold it: /status and the log
		// show the reason.
		j.Reason = maasapi.WithoutSecret(j.Reason)
		out[j.IP] = j
		return nil
	})
	return out, bad
}

// Jobs reads the jobs stored in store (for `leasekeeper orphans` on a
// stopped agent's state, and tests).
func Jobs(store *outbox.Store) ([]Job, error) {
	var out []Job
	err := store.View(Bucket, func(b *bbolt.Bucket) error {
		m, _ := readJobs(b)
		for _, j := range m {
			out = append(out, j)
		}
		return nil
	})
	sortJobs(out)
	return out, err
}

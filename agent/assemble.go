package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/agent/deliver"
	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/hooksock"
	"github.com/leasekeeper/leasekeeper/agent/orphans"
	"github.com/leasekeeper/leasekeeper/agent/outbox"
	"github.com/leasekeeper/leasekeeper/agent/pair"
	"github.com/leasekeeper/leasekeeper/agent/reconcile"
	"github.com/leasekeeper/leasekeeper/internal/maasapi"
	"github.com/leasekeeper/leasekeeper/internal/sockgroup"
)

// flushTimeout bounds the delivery attempt a stopping agent makes for
// what is queued (SIGTERM); what is left stays in the outbox.
const flushTimeout = 5 * time.Second

// Assemble builds the agent's parts from what a was made with (its
// configuration, logger, registry, clock and Version) and adds them to
// a: the durable outbox, the leases-file reconciler, the hook socket
// feeding both (through the reconciler, which records what the region is
// told in the same transaction as it queues the event), and the delivery
// to the region draining the outbox. The returned close function closes
// the outbox; call it after a.Run returns.
func (a *Agent) Assemble(opts ...AssembleOption) (func() error, error) {
	cfg, log, reg, version := a.cfg, a.root, a.reg, a.Version
	var o assembleOptions
	for _, f := range opts {
		f(&o)
	}
	now := a.now
	if err := os.MkdirAll(cfg.State.Dir, 0o750); err != nil {
		return nil, stateDirError(cfg.State.Dir, err)
	}
	store, err := outbox.Open(cfg.State.OutboxPath(), outbox.Options{
		Logger: log.With().Str("component", "outbox").Logger(), Registerer: reg, Now: now,
	})
	if err != nil {
		return nil, stateDirError(cfg.State.Dir, err)
	}
	fail := func(err error) (func() error, error) {
		store.Close()
		return nil, err
	}

	dcfg := regionConfig(cfg, version)
	dcfg.InflightFile = filepath.Join(cfg.State.Dir, "region-request")
	d, err := deliver.New(dcfg, store, log.With().Str("component", "deliver").Logger(), reg, now)
	if err != nil {
		return fail(fmt.Errorf("region: %w", err))
	}

	mode, err := reconcile.ParseMode(cfg.Reconcile.Mode)
	if err != nil {
		d.Close()
		return fail(fmt.Errorf("reconcile.mode: %w", err))
	}
	orph, err := newOrphans(cfg, store, log.With().Str("component", "orphans").Logger(), reg, now, version, o)
	if err != nil {
		d.Close()
		return fail(err)
	}
	rcfg := reconcile.Config{
		Leases: cfg.DHCPD.Leases, DhcpdConf: cfg.DHCPD.Config, PIDFile: cfg.DHCPD.PIDFile,
		Grace: cfg.Reconcile.ExpiryGrace, Poll: cfg.Reconcile.PollInterval, Mode: mode, Orphans: orph.Sink(),
		PairChannel: cfg.Pair.On(),
	}
	var rreg prometheus.Registerer = reg
	if cfg.DHCPD.Leases6 != "" {
		// Each reconciler takes its family's addresses; their metrics
		// are told apart by a family label.
		rcfg.Family = event.IPv4
		rreg = familyRegisterer(reg, event.IPv4)
	}
	rec, err := reconcile.New(rcfg, store, log.With().Str("component", "reconcile").Logger(), rreg, now)
	if err != nil {
		orph.Close()
		d.Close()
		return fail(err)
	}
	// dhcpd -6's leases, followed by a reconciler of their own. Neither
	// orphans (a DHCPv6 address is never freed through the API) nor a
	// failover pair (dhcpd -6 has none). Its mode is always detected from
	// dhcpd.config6: reconcile.mode speaks of dhcpd.conf's hooks, and a
	// rack forced to complement there (MAAS's helper tells MAAS) would
	// tell no DHCPv6 lease at all (MAAS's dhcpd6.conf runs no hook).
	var rec6 *reconcile.Reconciler
	closeRec := rec.Close
	if cfg.DHCPD.Leases6 != "" {
		rec6, err = reconcile.New(reconcile.Config{
			Leases: cfg.DHCPD.Leases6, DhcpdConf: cfg.DHCPD.Config6,
			Grace: cfg.Reconcile.ExpiryGrace, Poll: cfg.Reconcile.PollInterval, Mode: reconcile.ModeAuto,
			Family: event.IPv6, Bucket: bucket6,
			Keys: reconcile.Keys{Leases: "dhcpd.leases6", Conf: "dhcpd.config6", NoModeKey: true},
		}, store, log.With().Str("component", "reconcile6").Logger(), familyRegisterer(reg, event.IPv6), now)
		if err != nil {
			rec.Close()
			orph.Close()
			d.Close()
			return fail(err)
		}
		closeRec = func() { rec.Close(); rec6.Close() }
	} else if forgot, err := store.Forget(context.Background(), bucket6); err != nil {
		rec.Close()
		orph.Close()
		d.Close()
		return fail(stateDirError(cfg.State.Dir, err))
	} else if forgot {
		// Kept, it would be stale once dhcpd.leases6 is set again: its
		// leases' ends, told by hooks meanwhile, would be told again.
		log.Info().Msg("dhcpd.leases6 is no longer set: dropped its reconciler's stored state; set again, it starts from a new baseline")
	}

	d.SetStale(rec.Stale)
	orph.SetHeld(rec.Holds)

	// Hook events go through the reconciler: it queues them and records
	// them as told in one outbox transaction.
	var sink hooksock.Sink = rec
	if rec6 != nil {
		sink = families{rec, rec6}
	}
	hs, err := hooksock.New(hooksock.Config{
		Path: cfg.Hook.Socket, Group: cfg.Hook.SocketGroup, AllowedUIDs: cfg.HookUIDs(config.SystemUID), Spool: cfg.Hook.Spool,
	}, sink, log.With().Str("component", "hooksock").Logger(), reg, now)
	if err != nil {
		closeRec()
		orph.Close()
		d.Close()
		return fail(err)
	}
	// The hooks' backlog first: what the file showed is sent after it.
	rec.AwaitBacklog(hs.Drained())
	if rec6 != nil {
		rec6.AwaitBacklog(hs.Drained())
	}

	closePair := func() error { return nil }
	var links *pairLinks
	plog := log.With().Str("component", "pair").Logger()
	// None with the pair off (refused at load); an invalid list is
	// refused at load too, and by newPairLinks, with nothing forgotten.
	if partners, err := cfg.Pair.PartnerList(); err == nil {
		if err := forgetPartners(context.Background(), store, partners, plog); err != nil {
			closeRec()
			orph.Close()
			d.Close()
			return fail(stateDirError(cfg.State.Dir, err))
		}
	}
	if cfg.Pair.On() {
		build := func(pc pairConf) (*pair.Link, error) {
			return newPairLink(cfg, pc, store, rec, hs, d, a.Ready(), plog, reg, now)
		}
		inConf := func() []string {
			var names []string
			for _, p := range rec.PairStates() {
				names = append(names, p.Peer)
			}
			return names
		}
		links, err = newPairLinks(cfg, build, rec.PeerOf, rec.PrimaryAmong, rec.Primary, inConf, plog)
		if err != nil {
			closeRec()
			orph.Close()
			d.Close()
			return fail(err)
		}
		d.SetGate(links)
		d.SetStale(pairStale(links, rec))
		// What it drops unsent is no longer this agent's delivered news
		// in the channel's answers.
		d.OnSuperseded(rec.Dropped)
		a.Add("pair", TaskFunc(links.Run))
		closePair = links.Close
	}

	a.SetDeadLetters(store)
	a.SetOrphans(orph)
	a.SetStatus(status{store, d, rec, rec6, orph, links})
	a.Add("hooksock", hs)
	a.Add("reconcile", rec)
	if rec6 != nil {
		a.Add("reconcile6", rec6)
	}
	a.Add("orphans", orphansTask{r: orph, version: version})
	a.Add("deliver", deliverTask{d: d, version: version, run: TaskFunc(func(ctx context.Context, ready func()) error {
		ready()
		err := d.Run(ctx)
		// Stopping: one bounded attempt to hand the region what is queued.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
		defer cancel()
		if ferr := d.Flush(fctx); ferr != nil && !errors.Is(ferr, context.DeadlineExceeded) {
			log.Warn().Err(ferr).Int("queued", store.Depth()).Msg("flush on stop incomplete; the outbox keeps the rest")
		}
		return err
	})})
	return func() error { closePair(); closeRec(); orph.Close(); d.Close(); return store.Close() }, nil
}

// bucket6 is the outbox bucket of dhcpd.leases6's reconciler.
const bucket6 = "reconcile6"

// familyRegisterer labels the metrics of family's reconciler, when the
// agent runs one per family.
func familyRegisterer(reg prometheus.Registerer, family string) prometheus.Registerer {
	if reg == nil {
		return nil
	}
	return prometheus.WrapRegistererWith(prometheus.Labels{"family": family}, reg)
}

// families is the hook socket's sink when the agent follows dhcpd.leases6
// too: each event goes to the reconciler of its address's family, whose
// record of what the region was told it joins (an event with no valid
// address to dhcpd.leases's, which records it as undeliverable). The
// listener hands each its part of a batch (hooksock.Router).
type families struct{ v4, v6 *reconcile.Reconciler }

func (f families) Sinks() []hooksock.Sink { return []hooksock.Sink{f.v4, f.v6} }

func (f families) Part(ev event.Event) int {
	if ev.IP.IsValid() && reconcile.FamilyOf(ev.IP) == event.IPv6 {
		return 1
	}
	return 0
}

// Accept hands each reconciler its part, dhcpd.leases's first
// (hooksock.AcceptAll).
func (f families) Accept(ctx context.Context, evs []event.Event) error {
	return hooksock.AcceptAll(ctx, f, evs)
}

// stateDirError names state.dir in an error making the directory or
// opening the outbox in it, and says what to do about the usual causes
// (the outbox's own error names only the file): a directory the agent's
// user does not own (made by hand as root, or by an agent once run as
// root), a read-only file system, a full one.
func stateDirError(dir string, err error) error {
	var hint string
	switch {
	case errors.Is(err, fs.ErrPermission):
		who := agentUser()
		hint = fmt.Sprintf(": the agent's user (%s here; leasekeeper in the package) must own it: chown -R %s: %s", who, who, dir)
	case errors.Is(err, syscall.EROFS):
		hint = ": it is on a read-only file system, and the agent writes there at every event: remount it read-write, or set state.dir to a writable directory"
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT),
		// bbolt formats some causes into strings (growing the file).
		strings.Contains(err.Error(), syscall.ENOSPC.Error()):
		hint = fmt.Sprintf(": its file system is full: free space on it (df -h %s)", dir)
	}
	return fmt.Errorf("state.dir: %w%s", err, hint)
}

// agentUser names the user the agent runs as, for the chown to suggest.
func agentUser() string {
	uid := strconv.Itoa(os.Geteuid())
	if u, err := user.LookupId(uid); err == nil {
		return u.Username
	}
	return uid
}

// newPairLink builds the channel to the failover pair's other agent
// (agent/pair). What this agent holds, for the peer's queries, is its
// outbox and the events the reconciler waits to queue; it answers only
// once the agent is ready and the spool the hooks wrote while it was
// down is stored, so that a peer never hears "nothing held" from an
// agent that has not yet read its backlog. While the deliverer holds
// after a request the region left unanswered (it may still be applying
// it), every queued event counts as held, even one older than what the
// peer delivered of its address: that request can still land after the
// peer's newer news, so the peer waits (make chaos PAIR=1 SEED=7: a
// killed agent's request, applied by a slow region after the peer's
// newer commits of three addresses).
//
// pc is the link's own part: its partner's agent, the addresses it
// orders and this side's role towards it (pairLinks).
func newPairLink(cfg *config.Config, pc pairConf, store *outbox.Store, rec *reconcile.Reconciler, hs *hooksock.Listener, d *deliver.Deliverer,
	ready <-chan struct{}, log zerolog.Logger, reg prometheus.Registerer, now func() time.Time) (*pair.Link, error) {
	key, err := config.ReadPairKey(cfg.Pair.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("pair.key_file: %w", err)
	}
	held := pairHeld{pending: rec.PendingOldest, told: rec.OwnTold, queued: store.Oldest, holding: d.Holding}.held
	// Unready (queries unanswered: the peer waits, up to its hold_max)
	// while events wait that the outbox could not take yet (a full
	// disk): they are held, but in no place the answers read.
	isReady := func() bool {
		held, _ := hs.Held()
		return closed(ready) && closed(hs.Drained()) && held == 0 && rec.Unsent() == 0
	}
	return pair.New(pair.Config{
		Listen: pc.listen, Peer: pc.peer, Key: key, HoldMax: cfg.Pair.HoldMax, Primary: pc.primary, Ready: isReady,
		Memory: pairMemory{store, pc.memory},
	}, held, pairLogger(log, pc), pairRegisterer(reg, pc.peer), now)
}

// pairMemory keeps the pair channel's newest delivered news of each
// address (pair.Memory) in the outbox's key/value area: the address's
// bytes → the news's key (8 bytes) and tag (4), big-endian.
type pairMemory struct {
	store *outbox.Store
	// suffix ends its buckets' names: "" for pair.peer's link, "@" and
	// the partner's agent for one of pair.partners' (pairLinks).
	suffix string
}

// pairMemoryBucket names pairMemory's bucket.
const pairMemoryBucket = "pair-delivered"

// pairMemoryTimeout bounds one save: a full disk keeps the entries for
// the next.
const pairMemoryTimeout = 10 * time.Second

func (m pairMemory) Load() (map[netip.Addr]pair.News, error) {
	out := map[netip.Addr]pair.News{}
	err := m.store.View(pairMemoryBucket+m.suffix, func(b *bbolt.Bucket) error {
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			ip, ok := netip.AddrFromSlice(k)
			if ok && len(v) == 12 {
				out[ip.Unmap()] = pair.News{Key: int64(binary.BigEndian.Uint64(v)), Tag: binary.BigEndian.Uint32(v[8:])}
			}
			return nil
		})
	})
	return out, err
}

func (m pairMemory) Save(news map[netip.Addr]pair.News) error {
	ctx, cancel := context.WithTimeout(context.Background(), pairMemoryTimeout)
	defer cancel()
	return m.store.Update(ctx, pairMemoryBucket+m.suffix, func(b *bbolt.Bucket) ([]event.Event, error) {
		for ip, n := range news {
			v := binary.BigEndian.AppendUint64(make([]byte, 0, 12), uint64(n.Key))
			if err := b.Put(ip.AsSlice(), binary.BigEndian.AppendUint32(v, n.Tag)); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
}

// pairWaitsBucket names the bucket where pairMemory keeps how long each
// piece of the peer's news has held this agent's back (pair.Wait): the
// address's bytes and the news's key (8 bytes, big-endian) → nanoseconds
// (8 bytes, big-endian).
const pairWaitsBucket = "pair-waits"

func (m pairMemory) LoadWaits() (map[pair.Wait]time.Duration, error) {
	out := map[pair.Wait]time.Duration{}
	err := m.store.View(pairWaitsBucket+m.suffix, func(b *bbolt.Bucket) error {
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if len(k) < 8 || len(v) != 8 {
				return nil
			}
			ip, ok := netip.AddrFromSlice(k[:len(k)-8])
			if ok {
				w := pair.Wait{IP: ip.Unmap(), Key: int64(binary.BigEndian.Uint64(k[len(k)-8:]))}
				out[w] = time.Duration(binary.BigEndian.Uint64(v))
			}
			return nil
		})
	})
	return out, err
}

func (m pairMemory) SaveWaits(add map[pair.Wait]time.Duration, drop []pair.Wait) error {
	key := func(w pair.Wait) []byte { return binary.BigEndian.AppendUint64(w.IP.AsSlice(), uint64(w.Key)) }
	ctx, cancel := context.WithTimeout(context.Background(), pairMemoryTimeout)
	defer cancel()
	return m.store.Update(ctx, pairWaitsBucket+m.suffix, func(b *bbolt.Bucket) ([]event.Event, error) {
		for _, w := range drop {
			if err := b.Delete(key(w)); err != nil {
				return nil, err
			}
		}
		for w, d := range add {
			if err := b.Put(key(w), binary.BigEndian.AppendUint64(nil, uint64(d))); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
}

// pairHeld answers the pair channel's question (pair.HeldFunc): what
// this agent holds of each address, from the reconciler's pending events
// (pending), its record of what it last queued (told) and the outbox
// (queued); holding reports whether the deliverer holds its sends after
// an unanswered request.
type pairHeld struct {
	pending func(ips []netip.Addr, after []int64, key func(event.Event) int64) ([]int64, []bool)
	told    func(ips []netip.Addr, key func(event.Event) int64) []int64
	queued  func(ips []netip.Addr, after []int64, key func(event.Event) int64) ([]int64, []bool, error)
	holding func() bool
}

func (h pairHeld) held(ips []netip.Addr, after []int64) ([]pair.Holding, error) {
	if h.holding() {
		// The unanswered request may still land, whatever the peer
		// delivered since: every queued event is held.
		after = make([]int64, len(ips))
	}
	// Pending first: the reconciler moves an event from its pending ends
	// into the outbox in one step under its lock, so read in this order
	// an event moving meanwhile is seen at least once.
	pending, waiting := h.pending(ips, after, pair.Key)
	told := h.told(ips, pair.Key)
	queued, inQueue, err := h.queued(ips, after, pair.Key)
	if err != nil {
		return nil, err
	}
	out := make([]pair.Holding, len(ips))
	for i := range ips {
		o := queued[i]
		if k := pending[i]; k != 0 && (o == 0 || k < o) {
			o = k
		}
		out[i].Oldest = o
		if !inQueue[i] && !waiting[i] {
			// Nothing of it held: what was last told was delivered.
			out[i].Delivered = told[i]
		}
	}
	return out, nil
}

// pairStale is the deliverer's StaleFunc with the channel (judgePair).
func pairStale(links *pairLinks, rec *reconcile.Reconciler) deliver.StaleFunc {
	return judgePair(links.PeerDelivered, links.Copy, func(e event.Event) (int64, bool) { return rec.PairReplay(e, pair.Key) }, rec.Stale)
}

// judgePair judges an event about to be sent by what the pair channel's
// answers say the peer delivered of its address (peer: the key of the
// newest, 0 for none, and whether the peer answered about it; copy: whether
// the channel let the event go as a copy of that news), and else by
// stale (the reconciler's judgment without a channel).
//
//   - The peer delivered nothing newer: the event is not stale, however
//     far the leases file has moved on — the peer's newer news, if any,
//     waits for it (agent/pair) — and goes at once: restated with the
//     file's newest state it would take the region past lives the peer
//     is still to deliver, and held for the start-up judgment it would
//     hold the peer's news back that long.
//   - The peer delivered newer news: the event is dropped. Alone it would
//     take the region back from the peer's news (make chaos PAIR=1 seed
//     21: an end both racks told, the survivor's copy arriving after the
//     client's next commit; MAAS applies an expiry or release to the
//     MAC's address whatever came before it,
//     maasservicelayer/services/leases.py _release_lease_info), and
//     restated with the file's newest state it would jump past the news
//     the peer still holds, which the peer delivers itself (seed 14: an
//     old expiry restated with a commit 60 s newer, ahead of three lives
//     the peer held).
//   - The channel let the event go as this agent's copy of news the peer
//     delivered a moment before (copy: the two servers' hooks of one
//     ack, or of one lease going free; pair.Clear's Verdict.Copy): it is
//     dropped. Sent, it would tell the region nothing new.
//   - The peer did not answer about it: stale decides.
//
// A recovering side's replay (reconcile.ReasonPairReplay) goes only if
// the peer answered and delivered nothing newer than this agent's own
// last news of the address before it (replay): then the peer never
// spoke for the end it tells. Else it is dropped, as without a channel.
// The end of a lease dhcpd never wrote (reconcile.ReasonUnwritten) is
// dropped when the peer delivered news of its address newer than the
// commit it ends (replay: the peer renewed the lease, or ended it
// itself); the peer's older news does not hold it back, and a peer that
// did not answer leaves it to stale, as any event. So is the end rule 3
// made of a lease the file shows active past its end
// (reconcile.ReasonEndsPassed), weighed against the start of that
// lease's life: the peer's newer news shows the block is a stale copy
// (reconcile: staleCopyBound). And so is an end held for the life a
// partner's stale binding update cut (reconcile.ReasonStaleUpdate),
// dated at that life's end, weighed against the hook's own time: the
// peer's newer news is the client's renewal, or the address given on,
// which this side's file did not show (reconcile: HoldCut).
func judgePair(peer func(event.Event) (delivered int64, known bool), copy func(event.Event) bool, replay func(event.Event) (int64, bool), stale deliver.StaleFunc) deliver.StaleFunc {
	return func(ctx context.Context, e event.Event) (bool, event.Event) {
		delivered, known := peer(e)
		if copy(e) {
			return true, event.Event{}
		}
		if e.Reason == reconcile.ReasonPairReplay {
			own, ok := replay(e)
			return !known || !ok || delivered > own, event.Event{}
		}
		if own, ok := replay(e); ok && known && (e.Reason == reconcile.ReasonUnwritten || e.Reason == reconcile.ReasonEndsPassed || e.Reason == reconcile.ReasonStaleUpdate) && delivered > own {
			return true, event.Event{}
		}
		switch {
		case known && delivered <= pair.Key(e):
			return false, event.Event{}
		case known:
			return true, event.Event{}
		}
		return stale(ctx, e)
	}
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// AssembleOption changes how Assemble builds a part.
type AssembleOption func(*assembleOptions)

type assembleOptions struct {
	prober        orphans.Prober
	probeInterval time.Duration
}

// WithOrphanProber replaces the ARP probe run before an orphaned address
// is freed (a test runs it inside the lab's rack namespace), and how
// often an address that answers is probed again (0: the default).
func WithOrphanProber(p orphans.Prober, interval time.Duration) AssembleOption {
	return func(o *assembleOptions) { o.prober, o.probeInterval = p, interval }
}

// newOrphans builds the task freeing orphaned addresses in the region,
// with an API 2.0 client when [maas] is configured.
func newOrphans(cfg *config.Config, store *outbox.Store, log zerolog.Logger, reg prometheus.Registerer, now func() time.Time, version string, o assembleOptions) (*orphans.Releaser, error) {
	oc := orphans.Config{Probe: o.prober, ProbeInterval: o.probeInterval}
	c, err := maasClient(cfg, version)
	if err != nil {
		return nil, err
	}
	oc.Client = c
	return orphans.New(oc, store, log, reg, now)
}

// maasClient is the region's API 2.0 from [maas], nil when not set.
func maasClient(cfg *config.Config, version string) (*maasapi.Client, error) {
	if cfg.MAAS.APIURL == "" {
		return nil, nil
	}
	key, err := config.ReadMAASKey(cfg.MAAS.APIKeyFile)
	if err != nil {
		return nil, fmt.Errorf("maas.api_key_file: %w", err)
	}
	t, err := maasTransport(cfg)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: t}
	c, err := maasapi.New(cfg.MAAS.APIURL, key, hc, "leasekeeper/"+version)
	if err != nil {
		return nil, fmt.Errorf("maas.api_url: %w", err)
	}
	return c, nil
}

// maasTransport is the API 2.0 client's transport: maas.ca_file's CA
// trusted when set, and no proxy, whatever HTTPS_PROXY says, as for the
// leases API (agent/deliver): the rack reaches its region directly, and
// a request here carries the administrator key's signature, in clear
// text over http://.
func maasTransport(cfg *config.Config) (*http.Transport, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	if ca := cfg.MAAS.CAFile; ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("maas.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("maas.ca_file %s: no PEM certificate in it", ca)
		}
		t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return t, nil
}

// orphansTask runs the releaser and puts a reloaded [maas] in force
// without a restart.
type orphansTask struct {
	r       *orphans.Releaser
	version string
}

func (t orphansTask) Run(ctx context.Context, ready func()) error { return t.r.Run(ctx, ready) }

func (t orphansTask) Reload(cfg *config.Config) (func(), error) {
	c, err := maasClient(cfg, t.version)
	if err != nil {
		return nil, err // the [maas] in force stays
	}
	return func() { t.r.SetClient(c) }, nil
}

// regionConfig is the deliverer's configuration from [region].
func regionConfig(cfg *config.Config, version string) deliver.Config {
	r := cfg.Region
	return deliver.Config{
		URL: r.URL, OtherURLs: r.OtherURLs, ServerName: r.ServerName, CAFile: r.CAFile, CertFile: r.CertFile, KeyFile: r.KeyFile,
		TokenFile: r.TokenFile, BatchMax: r.BatchMax, Timeout: r.Timeout, UserAgent: "leasekeeper/" + version,
		UnansweredHold: r.UnansweredHold, AwaitCredentials: cfg.AwaitedCerts(),
	}
}

// CheckRegion reads the region's files as the agent does at start — the
// CA, the client certificate and key, the token — and checks the URL, so
// that `leasekeeper agent --print-config` refuses what start would.
func CheckRegion(cfg *config.Config) error {
	if err := deliver.Check(regionConfig(cfg, "")); err != nil {
		return fmt.Errorf("region: %w", err)
	}
	return nil
}

// CheckGroups looks up the groups the agent gives its sockets
// (control.group, hook.socket_group) as it does when it binds them: a
// group this machine does not have, or one this process may not give a
// file to, stops the start (sockgroup's errors). Each problem is told.
func CheckGroups(cfg *config.Config) error {
	var errs []error
	for _, g := range cfg.SocketGroups() {
		if _, err := sockgroup.Lookup(g.Key, g.Group); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// deliverTask runs the deliverer and puts a reloaded [region] in force
// without a restart (the next attempt uses it).
type deliverTask struct {
	d       *deliver.Deliverer
	version string
	run     TaskFunc
}

func (t deliverTask) Run(ctx context.Context, ready func()) error { return t.run(ctx, ready) }

func (t deliverTask) Reload(cfg *config.Config) (func(), error) {
	return t.d.Prepare(regionConfig(cfg, t.version))
}

// ReloadableRegionKeys are the [region] keys a SIGHUP puts in force
// without a restart: those of the deliverer's link (deliver.Prepare).
var ReloadableRegionKeys = []string{"region.url", "region.other_urls", "region.ca_file", "region.cert_file", "region.key_file",
	"region.server_name", "region.token_file", "region.batch_max", "region.timeout"}

// status combines what /status reports.
type status struct {
	s     *outbox.Store
	d     *deliver.Deliverer
	r     *reconcile.Reconciler
	r6    *reconcile.Reconciler // nil unless dhcpd.leases6 is set
	o     *orphans.Releaser
	links *pairLinks // nil without the pair channel ([pair] unset)
}

// PairReport is dhcpd's failover pair and the channel to the other
// agent; nil outside a pair.
func (x status) PairReport() *PairReport {
	ps := x.r.PairStates()
	if len(ps) == 0 && x.links == nil {
		return nil
	}
	var p reconcile.Pair
	if len(ps) > 0 {
		p = ps[0]
	}
	r := pairReport(p)
	r.Channel = x.channelReport(p.Peer)
	for _, o := range ps[min(1, len(ps)):] {
		or := pairReport(o)
		if x.links != nil && len(x.links.links) > 1 {
			or.Channel = x.channelReport(o.Peer)
		}
		r.Others = append(r.Others, *or)
	}
	return r
}

// channelReport is the channel of the failover peer named (the link to
// its partner's agent); nil without the channel.
func (x status) channelReport(peer string) *PairChannelReport {
	if x.links == nil {
		return nil
	}
	h := x.links.ofPeer(peer).Health()
	c := &PairChannelReport{Peer: h.Peer, Alone: h.Alone}
	if !h.Heard.IsZero() {
		t := h.Heard.UTC()
		c.Heard = &t
	}
	if !h.Waiting.IsZero() {
		t := h.Waiting.UTC()
		c.Waiting = &t
	}
	return c
}

// pairReport is PairReport's account of one failover pair.
func pairReport(p reconcile.Pair) *PairReport {
	r := &PairReport{Peer: p.Peer, Role: p.Role, MyState: p.MyState, PartnerState: p.PartnerState}
	switch {
	case !p.InPair():
		r.Speaks = "for its dhcpd alone: [pair] is set, but dhcpd.conf has no failover peer that a pool uses"
	case p.Survivor():
		r.Speaks = "for the pair: its partner is down"
	case p.Recovering():
		r.Speaks = "for nothing new: dhcpd is catching up with its partner, whose agent told its news"
	case p.MyState == "":
		r.Speaks = "unknown: dhcpd has not written its failover state yet"
	default:
		r.Speaks = "for the leases its dhcpd handles"
	}
	return r
}

func (x status) OrphanReports() []OrphanReport {
	out := []OrphanReport{}
	for _, j := range x.o.Jobs() {
		r := OrphanReport{IP: j.IP.String(), State: j.State, Reason: j.Reason, Ends: time.Unix(j.Ends, 0).UTC(), Attempts: j.Attempts}
		if !j.Next.IsZero() {
			t := j.Next.UTC()
			r.Next = &t
		}
		out = append(out, r)
	}
	return out
}

func (x status) Depth() int               { return x.s.Depth() }
func (x status) DeadLetterCount() int     { return x.s.DeadLetterCount() }
func (x status) LastDelivery() time.Time  { return x.d.LastDelivery() }
func (x status) OldestPending() time.Time { return x.s.OldestPending() }

// askingShown: a request unanswered this long shows in /status.
const askingShown = 5 * time.Second

func (x status) RegionReport() *RegionReport {
	h := x.d.Health()
	r := &RegionReport{State: h.State, Error: h.Error, Hint: h.Hint, FailedAttempts: h.Attempts, Controller: x.d.Controller()}
	if !h.Since.IsZero() {
		t := h.Since.UTC()
		r.Since = &t
	}
	if since, n := x.d.Asking(); !since.IsZero() && time.Since(since) >= askingShown {
		r.Waiting = &RegionWaitReport{Since: since.UTC(), Events: n}
	}
	return r
}

func (x status) LeasesFileReport() *LeasesFileReport { return leasesFileReport(x.r) }

func (x status) LeasesFile6Report() *LeasesFileReport {
	if x.r6 == nil {
		return nil
	}
	return leasesFileReport(x.r6)
}

func (x status) ModeReport() *ModeReport { return modeReport(x.r) }

func (x status) Mode6Report() *ModeReport {
	if x.r6 == nil {
		return nil
	}
	return modeReport(x.r6)
}

func leasesFileReport(rec *reconcile.Reconciler) *LeasesFileReport {
	h := rec.LeasesFile()
	r := &LeasesFileReport{Path: h.Path, ReadError: h.ReadError}
	if !h.AbsentSince.IsZero() {
		t := h.AbsentSince.UTC()
		r.MissingSince = &t
	}
	if !h.UnreadableSince.IsZero() {
		t := h.UnreadableSince.UTC()
		r.UnreadableSince = &t
	}
	return r
}

func modeReport(rec *reconcile.Reconciler) *ModeReport {
	m := rec.Mode()
	if m == nil {
		return nil
	}
	return &ModeReport{Mode: string(m.Mode), Detected: string(m.Detected), Forced: m.Forced, Unsure: m.Unsure,
		Kept: m.Kept, Why: m.Why, KeptBack: rec.KeptBack()}
}

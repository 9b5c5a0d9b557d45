package orphans

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.etcd.io/bbolt"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/agent/outbox"
	"github.com/leasekeeper/leasekeeper/internal/maasapi"
	"github.com/leasekeeper/leasekeeper/internal/promreg"
	"github.com/leasekeeper/leasekeeper/release/rack"
)

// Defaults.
const (
	DefaultProbeInterval = 30 * time.Second // an address that answers is probed again this often
	DefaultProbeWait     = time.Second      // how long a probe listens
	backoffMin           = time.Second
	backoffMax           = time.Minute
	refusedRetry         = 10 * time.Minute
	unreleasableRetry    = time.Hour
	offLinkRetry         = time.Hour // an address no link of the rack reaches (rack.ErrNotOnLink)
	busyRecheck          = time.Hour // a busy address's record is read again this often (probed every ProbeInterval)
	requestTimeout       = 30 * time.Second
)

// Prober asks whether anybody holds an address on the rack's link.
type Prober func(ctx context.Context, ip netip.Addr, wait time.Duration) (rack.Probe, error)

// Config is what the Releaser needs.
type Config struct {
	// Client is the region's API 2.0; nil when [maas] is not configured.
	Client        *maasapi.Client
	Probe         Prober // nil: rack.ProbeARP
	ProbeInterval time.Duration
	ProbeWait     time.Duration
}

// Outcome is how an attempt on a job ended.
type Outcome struct {
	Done   bool   // the job is finished (freed, already free, or left alone)
	Result string // freed, gone, other-mac, not-discovered, back, or the job's state
	Reason string
	By     string // who answered the probe (logs only: /status discloses no MACs)

	offLink bool   // blocked because no link of this rack reaches the address (rack.ErrNotOnLink)
	asked   bool   // the region's record was read in this attempt
	clock   bool   // refused because this host's clock is behind the region's (maasapi.IsClockSkew)
	tls     string // misdirected because of the region's certificate or port (maasapi.CertProblem): what to change
}

// Releaser is the agent task working the jobs.
type Releaser struct {
	cfg   Config
	store *outbox.Store
	log   zerolog.Logger
	reg   prometheus.Registerer
	now   func() time.Time
	met   *metrics
	wake  chan struct{}

	mu   sync.Mutex // guards jobs, said, held
	jobs map[netip.Addr]Job
	said map[netip.Addr]string                               // news
	held func(ip netip.Addr, since int64) (held, known bool) // SetHeld
	work sync.Mutex                                          // one attempt at a time (the task or ReleaseNow)
}

// New loads the stored jobs.
func New(cfg Config, store *outbox.Store, log zerolog.Logger, reg prometheus.Registerer, now func() time.Time) (*Releaser, error) {
	if cfg.Probe == nil {
		cfg.Probe = rack.ProbeARP
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = DefaultProbeInterval
	}
	cfg.ProbeInterval = min(cfg.ProbeInterval, time.Minute)
	if cfg.ProbeWait <= 0 {
		cfg.ProbeWait = DefaultProbeWait
	}
	if now == nil {
		now = time.Now
	}
	r := &Releaser{cfg: cfg, store: store, log: log, reg: reg, now: now, wake: make(chan struct{}, 1),
		jobs: map[netip.Addr]Job{}, said: map[netip.Addr]string{}}
	r.met = newMetrics(r.stateCounts)
	if err := r.load(); err != nil {
		return nil, err
	}
	if err := promreg.Register(reg, r.met.collectors()...); err != nil {
		return nil, fmt.Errorf("orphans: metrics: %w", err)
	}
	return r, nil
}

// Sink is what the reconciler hands orphans to.
func (r *Releaser) Sink() Sink { return Sink{r} }

// Close unregisters the metrics.
func (r *Releaser) Close() { promreg.Unregister(r.reg, r.met.collectors()...) }

// Wake makes the task read the stored jobs again.
func (r *Releaser) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// load reads the jobs from the store, counting the new ones as found.
func (r *Releaser) load() error {
	var m map[netip.Addr]Job
	var bad int
	if err := r.store.View(Bucket, func(b *bbolt.Bucket) error { m, bad = readJobs(b); return nil }); err != nil {
		return fmt.Errorf("orphans: read jobs: %w", err)
	}
	if bad > 0 {
		r.log.Warn().Int("records", bad).Msg("stored orphan jobs did not decode; skipped")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for ip, j := range m {
		old, had := r.jobs[ip]
		if !had || old.Found != j.Found {
			r.met.found.Inc()
			r.jobs[ip] = j
			delete(r.said, ip) // a new lease's job: its states are news
		}
	}
	r.met.held.Set(float64(len(r.jobs)))
	return nil
}

// Jobs are the addresses waiting to be freed, by address.
func (r *Releaser) Jobs() []Job {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Job, 0, len(r.jobs))
	for _, j := range r.jobs {
		out = append(out, j)
	}
	sortJobs(out)
	return out
}

func sortJobs(js []Job) { slices.SortFunc(js, func(a, b Job) int { return a.IP.Compare(b.IP) }) }

// client is the region's API 2.0 in force (nil: [maas] not configured).
func (r *Releaser) client() *maasapi.Client {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfg.Client
}

// SetClient puts a reloaded [maas] in force (nil: not configured any
// more): the next attempt uses it, and every job is due at once, those
// left unconfigured or refused included; what each comes to is logged
// again (a key still refused says so after the reload that was to mend
// it).
func (r *Releaser) SetClient(c *maasapi.Client) {
	r.mu.Lock()
	r.cfg.Client = c
	clear(r.said)
	for ip, j := range r.jobs {
		j.Next = time.Time{}
		r.jobs[ip] = j
	}
	r.mu.Unlock()
	r.Wake()
}

// Run works the jobs until ctx ends.
func (r *Releaser) Run(ctx context.Context, ready func()) error {
	if r.client() == nil {
		r.log.Info().Msg("[maas] api_url and api_key_file are not set: addresses MAAS keeps as observed after their lease was dropped out of range are listed in status, not freed")
	}
	ready()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
			if err := r.load(); err != nil {
				r.log.Error().Err(err).Msg("cannot read the orphan jobs; retrying at the next wake")
			}
		case <-timer.C:
		}
		next := r.runDue(ctx)
		d := time.Hour
		if !next.IsZero() {
			d = max(next.Sub(r.now()), 0)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(d)
	}
}

// runDue makes an attempt on every job whose time has come and returns
// the earliest next attempt (zero: none).
func (r *Releaser) runDue(ctx context.Context) time.Time {
	for _, j := range r.Jobs() {
		if ctx.Err() != nil {
			return time.Time{}
		}
		if j.State == StateUnconfigured && r.client() == nil {
			continue
		}
		if !j.Next.IsZero() && r.now().Before(j.Next) {
			continue
		}
		r.attempt(ctx, j.IP)
	}
	var next time.Time
	for _, j := range r.Jobs() {
		if j.State == StateUnconfigured {
			continue
		}
		if next.IsZero() || j.Next.Before(next) {
			next = j.Next
		}
	}
	return next
}

// SetHeld gives the releaser the reconciler's view (its Holds): whether
// dhcpd holds an address again since the orphaned lease's end, a range
// having grown back over it (the leases file's block, or a hook's
// commit the file does not show yet). A job for such an address is
// withdrawn, never released: the same client may lease it again, and
// the region's record, which looks the same as the orphan's, is then
// that lease's. Unset, the region's record and the probe decide alone.
func (r *Releaser) SetHeld(held func(ip netip.Addr, since int64) (held, known bool)) {
	r.mu.Lock()
	r.held = held
	r.mu.Unlock()
}

// back reports, with SetHeld's view, whether dhcpd holds j's address
// again since its lease ended, or an Outcome that keeps the job when
// that is not known.
func (r *Releaser) back(j Job) (Outcome, bool) {
	r.mu.Lock()
	held := r.held
	r.mu.Unlock()
	if held == nil {
		return Outcome{}, false
	}
	switch h, known := held(j.IP, j.Ends); {
	case h:
		return Outcome{Done: true, Result: "back", Reason: "dhcpd.leases lists the address again, or a hook told a new lease of it (a range holds it): no orphan any more, its leases are the region's to keep"}, true
	case !known:
		return Outcome{Result: StateBlocked, Reason: "dhcpd.leases is not read whole yet, or its last read failed: whether a range holds the address again cannot be told"}, true
	}
	return Outcome{}, false
}

// ReleaseNow makes an attempt on ip's job now, with every check
// (`leasekeeper orphans --release`). A job that is not there is an error.
func (r *Releaser) ReleaseNow(ctx context.Context, ip netip.Addr) (Outcome, error) {
	r.mu.Lock()
	_, ok := r.jobs[ip]
	r.mu.Unlock()
	if !ok {
		return Outcome{}, fmt.Errorf("no orphaned address %s", ip)
	}
	return r.attempt(ctx, ip), nil
}

// attempt runs the checks and the release for ip's job and records the outcome.
func (r *Releaser) attempt(ctx context.Context, ip netip.Addr) Outcome {
	r.work.Lock()
	defer r.work.Unlock()
	r.mu.Lock()
	j, ok := r.jobs[ip]
	r.mu.Unlock()
	if !ok {
		return Outcome{Done: true, Result: "gone"}
	}
	now := r.now()
	out := r.check(ctx, j)
	j.Last = now
	if out.asked {
		j.Asked = now
	}
	log := r.log.With().Stringer("ip", j.IP).Str("mac", j.MAC).Logger()
	if out.Done {
		switch out.Result {
		case "freed":
			r.met.freed.Inc()
			log.Info().Str("reason", out.Reason).Msg("freed the observed address in the region")
		case "gone":
			r.met.freed.Inc()
			log.Info().Str("reason", out.Reason).Msg("the region no longer holds the address: nothing to free")
		default:
			r.met.refused.WithLabelValues(out.Result).Inc()
			log.Warn().Str("reason", out.Reason).Str("region_macs", out.By).Msg("left the address alone in the region")
		}
		r.finish(ctx, j)
		return out
	}
	j.State, j.Reason = out.Result, out.Reason
	fresh := r.news(j.IP, out.said())
	switch out.Result {
	case StateUnconfigured:
		j.Next = time.Time{}
		if fresh {
			log.Warn().Int64("ends", j.Ends).Msg("the region keeps this address as observed until an API key is configured ([maas] api_url, api_key_file): the expiry alone does not free an address outside its dynamic ranges")
		}
	case StateBusy:
		j.Next = now.Add(r.cfg.ProbeInterval)
		r.met.busy.Inc()
		// Said when it starts, then with each read of the region's
		// record (hourly): not at every probe, for ever, per address.
		if fresh || out.asked {
			log.Info().Str("reason", out.Reason).Str("answered_by", out.By).Time("next", j.Next).Msg("kept the address: something answers for it; probing again")
		}
	case StateBlocked:
		if out.offLink {
			// Not a passing failure: asking the region every
			// ProbeInterval, for ever, for each such address would
			// change nothing. Tried hourly (a link or route may come).
			j.Next = now.Add(offLinkRetry)
			if fresh {
				log.Warn().Str("reason", out.Reason).Time("next", j.Next).Msg("kept the address: no link of this rack reaches it, so whether it is in use cannot be told; tried again hourly")
			}
			break
		}
		j.Next = now.Add(r.cfg.ProbeInterval)
		// Warned when it starts (a probe that keeps failing, a leases
		// file not read yet), then at debug level at each probe.
		ev := log.Debug()
		if fresh {
			ev = log.Warn()
		}
		ev.Str("reason", out.Reason).Time("next", j.Next).Msg("kept the address: cannot tell whether it is in use")
	case StateRefused:
		j.Next = now.Add(refusedRetry)
		label, fix, msg := "api-key", "put the API key of a MAAS administrator (a user MAAS lets list every address and force-release one: maas apikey --username ADMIN) in maas.api_key_file and reload", "the region refuses to free the address with this API key"
		if out.clock {
			// Not the key: MAAS refuses any request signed more than
			// 300 s before its own clock's now.
			label, fix, msg = "clock", "synchronise this rack's clock with the region's (chrony or systemd-timesyncd, as MAAS sets up on its racks): MAAS refuses an API request whose OAuth timestamp is more than 300 s older than its own clock", "the region refuses the API request: this rack's clock is behind the region's"
		}
		if fresh {
			r.met.refused.WithLabelValues(label).Inc()
			log.Error().Str("reason", out.Reason).Time("next", j.Next).Str("fix", fix).Msg(msg)
		}
	case StateMisdirected:
		// A configuration to mend, like a refused key: every job meets
		// it, so backing off to a minute and warning at each try, for
		// ever, said nothing new. The reload that mends it (SetClient)
		// makes every job due at once.
		j.Next = now.Add(refusedRetry)
		switch {
		case !fresh:
		case out.tls != "":
			r.met.refused.WithLabelValues("api-tls").Inc()
			log.Error().Str("reason", out.Reason).Time("next", j.Next).Str("fix", out.tls+", and reload").
				Msg("the region's API cannot be trusted over TLS as configured")
		default:
			r.met.refused.WithLabelValues("api-url").Inc()
			log.Error().Str("reason", out.Reason).Time("next", j.Next).
				Str("fix", "set maas.api_url to the URL `maas login` takes for this region (http://REGION:5240/MAAS/, or https://REGION:5443/MAAS/ with TLS) and reload").
				Msg("maas.api_url does not lead to the region's API")
		}
	case StateUnconfirmed:
		j.Next = now.Add(refusedRetry)
		if fresh {
			r.met.refused.WithLabelValues("unconfirmed").Inc()
			log.Error().Str("reason", out.Reason).Time("next", j.Next).
				Msg("the region did not free the address although it answered the release with success")
		}
	case StateUnreleasable:
		j.Next = now.Add(unreleasableRetry)
		if fresh {
			r.met.refused.WithLabelValues("linked-interfaces").Inc()
			log.Warn().Str("reason", out.Reason).Time("next", j.Next).
				Msg("MAAS cannot free this observed address through its API; kept in status and tried again hourly")
		}
	default: // retrying
		j.Attempts++
		d := min(backoffMin<<min(j.Attempts-1, 10), backoffMax)
		j.Next = now.Add(d)
		// Warned when it starts; each later try (every minute at most,
		// per address, while the region is down) at debug level.
		ev := log.Debug()
		if fresh {
			ev = log.Warn()
		}
		ev.Str("reason", out.Reason).Int("attempts", j.Attempts).Dur("retry_in", d).Msg("could not free the address yet; retrying")
	}
	r.save(ctx, j)
	return out
}

// check decides and, when everything allows it, frees the address.
func (r *Releaser) check(ctx context.Context, j Job) Outcome {
	if o, stop := r.back(j); stop {
		return o
	}
	c := r.client()
	if c == nil {
		return Outcome{Result: StateUnconfigured, Reason: "no [maas] api_url/api_key_file: the region keeps listing the address as observed until an API key is configured"}
	}
	if j.State == StateBusy && r.now().Sub(j.Asked) < busyRecheck {
		// Something answered at the last attempt and the region's
		// record was read less than busyRecheck ago: probe first, and
		// read the record only once nothing answers. A host squatting
		// on the address cost a GET of its record every ProbeInterval,
		// for ever; a range shrunk under many cost the region as many a
		// minute, and the attempts, one at a time, fell behind.
		p, err := r.cfg.Probe(ctx, j.IP, r.cfg.ProbeWait)
		if o, busy := busyOutcome(p, err); busy {
			return o
		}
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	recs, err := c.Records(ctx, j.IP)
	if err != nil {
		return r.regionOutcome(ctx, err)
	}
	out := r.decide(ctx, c, j, recs)
	out.asked = true
	return out
}

// decide goes on from the region's records for j's address: the MAC,
// the probe, the release.
func (r *Releaser) decide(ctx context.Context, c *maasapi.Client, j Job, recs []maasapi.IPAddress) Outcome {
	var disc *maasapi.IPAddress
	var other []string
	for i := range recs {
		if recs[i].AllocType == maasapi.AllocDiscovered {
			disc = &recs[i]
		} else {
			other = append(other, recs[i].AllocTypeName)
		}
	}
	if disc == nil {
		if len(other) > 0 {
			return Outcome{Done: true, Result: "not-discovered", Reason: fmt.Sprintf("the region's record for the address is %v, not observed (discovered): someone reserved or assigned it", other)}
		}
		return Outcome{Done: true, Result: "gone", Reason: "the region has no record of the address"}
	}
	mac, err := event.NormalizeMAC(j.MAC)
	if err != nil {
		mac = j.MAC
	}
	macs := disc.MACs()
	if !slices.Contains(macs, mac) {
		return Outcome{Done: true, Result: "other-mac", Reason: "the region's observed record is tied to another MAC than the lease's: another client has it now", By: fmt.Sprint(macs)}
	}
	if slices.ContainsFunc(macs, func(m string) bool { return m != mac }) {
		// Another client committed the address since: MAAS updates the
		// record and links it to that MAC's interfaces too, keeping the
		// old link (src/maasservicelayer/services/leases.py,
		// _commit_lease_info: create_or_update, link_ip). The record is
		// that client's lease as much as the orphan's; freeing it would
		// take the address from it. MAAS drops the record at the next
		// lease event, for another address, of either MAC
		// (store_lease_info). Its release would fail on such a record
		// anyway (see unreleasable), but that is MAAS's bug to keep, not
		// a guard to rely on.
		return Outcome{Done: true, Result: "other-mac", Reason: "the region's observed record is linked to another MAC besides the lease's: another client committed the address since; MAAS drops the record at either MAC's next lease of another address", By: fmt.Sprint(macs)}
	}
	p, err := r.cfg.Probe(ctx, j.IP, r.cfg.ProbeWait)
	switch {
	case err != nil && ctx.Err() != nil:
		return Outcome{Result: StateRetrying, Reason: "probe interrupted: " + err.Error()}
	case errors.Is(err, rack.ErrNotOnLink):
		return Outcome{Result: StateBlocked, Reason: err.Error() + ": nothing on this rack can tell whether a client holds it (a relayed subnet?); once you know it is unused, maas PROFILE ipaddresses release ip=IP force=true discovered=true frees it", offLink: true}
	case err != nil:
		return Outcome{Result: StateBlocked, Reason: err.Error()}
	}
	if o, busy := busyOutcome(p, nil); busy {
		return o
	}
	// Again: the region's record and the probe took time, in which a
	// range may have grown back and the client leased the address anew.
	if o, stop := r.back(j); stop {
		return o
	}
	switch err := c.ReleaseDiscovered(ctx, j.IP); {
	case err == nil:
		return r.confirm(ctx, c, j, mac, p.Iface)
	case errors.Is(err, maasapi.ErrAbsent):
		return Outcome{Done: true, Result: "gone", Reason: "the region answered that no discovered record exists (freed meanwhile)"}
	case failsAlways(*disc, err):
		return Outcome{Result: StateUnreleasable, Reason: unreleasable(*disc, mac, err)}
	default:
		return r.regionOutcome(ctx, err)
	}
}

// confirm reads the region's records for j's address again after a
// release MAAS answered with success: only a record gone (or no longer
// the lease's MAC's) is a free. A success that freed nothing comes from
// whatever answers for the region: a followed redirect did (maasapi
// follows none now), a proxy that answers a POST itself would.
func (r *Releaser) confirm(ctx context.Context, c *maasapi.Client, j Job, mac, iface string) Outcome {
	recs, err := c.Records(ctx, j.IP)
	if err != nil {
		o := r.regionOutcome(ctx, err)
		o.Reason = "the region answered the release with success; reading its record again failed: " + o.Reason
		return o
	}
	for _, rec := range recs {
		if rec.AllocType == maasapi.AllocDiscovered && slices.Contains(rec.MACs(), mac) {
			return Outcome{Result: StateUnconfirmed, Reason: fmt.Sprintf("the release (POST %sipaddresses/ op=release) was answered with success, but the region still lists the observed record for the lease's MAC: something between this rack and the region answers for it (a proxy?); set maas.api_url to the region's own URL", c.Base())}
		}
	}
	return Outcome{Done: true, Result: "freed", Reason: "observed for the lease's MAC, silent on " + iface}
}

// failsAlways reports whether err, from releasing rec, is MAAS's release
// failing as it does every time for a record with several interfaces
// (see unreleasable); another 500 is retried with backoff.
func failsAlways(rec maasapi.IPAddress, err error) bool {
	return len(rec.Interfaces) > 1 && maasapi.IsInternalError(err) && strings.Contains(err.Error(), "can't be deleted")
}

// unreleasable says why MAAS cannot free rec and what frees it. MAAS's
// release (src/maasserver/api/ip_addresses.py, 3.6 to master) unlinks
// the record from each of its interfaces in turn, and unlinking a
// DISCOVERED record deletes it (src/maasserver/models/interface.py,
// unlink_ip_address): the second interface's turn deletes it again,
// Django refuses ("… object can't be deleted because its id attribute
// is set to None."), and the request fails with a 500, rolled back. A
// record has several interfaces when the lease's MAC is a machine's NIC
// with VLANs or a bond on it (the leases API links it to every interface
// with the MAC: src/maasservicelayer/services/interfaces.py, link_ip); a
// record a second MAC's commit linked is left alone before (decide).
// MAAS itself deletes it at the next lease event of the MAC for another
// address in a range of a subnet of the same family
// (src/maasservicelayer/services/leases.py, store_lease_info).
func unreleasable(rec maasapi.IPAddress, mac string, err error) string {
	names := make([]string, len(rec.Interfaces))
	for i, f := range rec.Interfaces {
		names[i] = f.Name + " (" + strings.ToLower(f.MACAddress) + ")"
	}
	return fmt.Sprintf("MAAS cannot release this observed record: it is linked to %d interfaces, %s, and MAAS's release deletes it at the first and fails at the next (%v). Nothing frees it through the API; MAAS drops it by itself the next time %s (or another MAC listed) leases an address from this region, e.g. at the machine's next PXE boot, or when all but one of those interfaces are deleted",
		len(rec.Interfaces), strings.Join(names, ", "), err, mac)
}

// regionOutcome is apiOutcome, a refusal naming the key's user when the
// region says who it is.
func (r *Releaser) regionOutcome(ctx context.Context, err error) Outcome {
	o := apiOutcome(err)
	if o.Result == StateRefused && errors.Is(err, maasapi.ErrForbidden) {
		if c := r.client(); c == nil {
			return o
		} else if who, werr := c.Whoami(ctx); werr == nil {
			o.Reason = fmt.Sprintf("the API key is %q's: %s", who.Username, o.Reason)
		}
	}
	return o
}

func apiOutcome(err error) Outcome {
	switch {
	case maasapi.IsClockSkew(err):
		return Outcome{Result: StateRefused, Reason: "this rack's clock is more than 300 s behind the region's: " + err.Error(), clock: true}
	case errors.Is(err, maasapi.ErrForbidden) || errors.Is(err, maasapi.ErrUnauthorized):
		return Outcome{Result: StateRefused, Reason: err.Error()}
	case maasapi.IsMisdirected(err):
		return Outcome{Result: StateMisdirected, Reason: err.Error()}
	}
	if why := maasapi.CertProblem(err); why != "" {
		return Outcome{Result: StateMisdirected, Reason: why + " (" + err.Error() + ")", tls: why}
	}
	return Outcome{Result: StateRetrying, Reason: err.Error()}
}

// save stores j, unless a newer job for the address replaced it while
// the attempt was on the wire (the reconciler's Sink.Put: that one is the
// lease to free, and the next load takes it); a failure is logged and the
// job kept in memory.
func (r *Releaser) save(ctx context.Context, j Job) {
	superseded := false
	err := r.store.Update(context.WithoutCancel(ctx), Bucket, func(b *bbolt.Bucket) ([]event.Event, error) {
		if cur, ok := getJob(b, j.IP); ok && !cur.Found.Equal(j.Found) {
			superseded = true
			return nil, nil
		}
		return nil, putJob(b, j)
	})
	r.mu.Lock()
	if cur, ok := r.jobs[j.IP]; !ok || cur.Found.Equal(j.Found) {
		r.jobs[j.IP] = j
	}
	r.mu.Unlock()
	if err != nil {
		r.log.Error().Err(err).Stringer("ip", j.IP).Msg("cannot store the orphan job's state")
	}
	if superseded {
		r.Wake()
	}
}

// finish removes j (unless a newer job for the address replaced it).
func (r *Releaser) finish(ctx context.Context, j Job) {
	err := r.store.Update(context.WithoutCancel(ctx), Bucket, func(b *bbolt.Bucket) ([]event.Event, error) {
		if cur, ok := getJob(b, j.IP); ok && !cur.Found.Equal(j.Found) {
			return nil, nil
		}
		return nil, b.Delete([]byte(j.IP.String()))
	})
	if err != nil {
		r.log.Error().Err(err).Stringer("ip", j.IP).Msg("cannot remove the finished orphan job; it is checked again")
		return
	}
	r.mu.Lock()
	if cur, ok := r.jobs[j.IP]; ok && cur.Found.Equal(j.Found) {
		delete(r.jobs, j.IP)
		delete(r.said, j.IP)
	}
	r.met.held.Set(float64(len(r.jobs)))
	r.mu.Unlock()
}

// stateCounts is how many jobs are in each state, for the metrics.
func (r *Releaser) stateCounts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := make(map[string]int, len(states))
	for _, j := range r.jobs {
		n[j.State]++
	}
	return n
}

// news reports whether state is news for ip's log: not what the last
// attempt since this process started came to (a job's state is read
// back from disk, so a restart says each once more). A state held for
// hours or for ever (a refused key, a busy address, an off-link one) is
// logged and counted when it starts, not at every attempt, per address;
// any other outcome in between makes it news again.
func (r *Releaser) news(ip netip.Addr, state string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.said[ip] == state {
		return false
	}
	r.said[ip] = state
	return true
}

// said is what news compares: the state, and for a blocked or refused
// one, why.
func (o Outcome) said() string {
	switch {
	case o.offLink:
		return o.Result + "/off-link"
	case o.clock:
		return o.Result + "/clock"
	case o.tls != "":
		return o.Result + "/tls: " + o.tls
	}
	return o.Result
}

// busyOutcome is the busy Outcome when a probe without error found the
// address in use.
func busyOutcome(p rack.Probe, err error) (Outcome, bool) {
	switch {
	case err != nil:
		return Outcome{}, false
	case p.Local:
		return Outcome{Result: StateBusy, Reason: "the address is this rack's own"}, true
	case p.By != nil:
		return Outcome{Result: StateBusy, Reason: "something answers an ARP probe for it on " + p.Iface, By: p.By.String()}, true
	}
	return Outcome{}, false
}

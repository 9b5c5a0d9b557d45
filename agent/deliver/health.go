package deliver

import (
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// States of the way to the region, Health.State.
const (
	StateUnknown = "unknown" // nothing sent yet
	StateOK      = "ok"      // the region answers for the events (2xx, or a refusal of one of them)
	StateOutage  = "outage"  // no answer, or the region says it is unavailable: waiting, nothing lost
	StateConfig  = "config"  // the agent's settings are wrong (port, path, certificates): retrying until fixed
	StateFailing = "failing" // the region fails (500, a service-layer 404) or refuses (422) every event: retrying, nothing dead-lettered
	// StateWaiting: the region's credential files are not there yet
	// (Config.AwaitCredentials: a MAAS rack not registered); nothing is
	// sent until a reload brings them.
	StateWaiting = "waiting"
)

// states are every State, for the state metric.
var states = []string{StateUnknown, StateOK, StateOutage, StateConfig, StateFailing, StateWaiting}

// States are every state Health.State takes.
func States() []string { return slices.Clone(states) }

// Health is how delivery to the region is going, for `leasekeeper
// status`: the state, and while there is a problem what the agent saw,
// what an operator can do, and since when.
type Health struct {
	State    string
	Error    string    // the last failure: "HTTP 403: {…}", "dial tcp …: connection refused"
	Hint     string    // what to do about it
	Since    time.Time // when the problem began; zero when ok
	Attempts int       // failed attempts since
}

// Health reports how delivery is going; safe for concurrent use.
func (d *Deliverer) Health() Health {
	d.health.mu.Lock()
	defer d.health.mu.Unlock()
	return d.health.h
}

// health keeps Health and the log readable: a problem is logged when it
// begins or changes (another state or another hint), then once every
// WarnEvery while it lasts, and its end once.
type health struct {
	mu      sync.Mutex
	h       Health
	lastLog time.Time
}

// observe takes one attempt's outcome.
func (hs *health) observe(d *Deliverer, o outcome) {
	switch o.kind {
	case kindOutage:
		hs.problem(d, StateOutage, o.what, o.hint)
	case kindConfig:
		hs.problem(d, StateConfig, o.what, o.hint)
	case kindOK:
		hs.ok(d)
	default:
		// A refusal or a 500 is an answer about the events: the way to
		// the region works. A failing region stays failing until it
		// takes something.
		hs.mu.Lock()
		failing := hs.h.State == StateFailing
		hs.mu.Unlock()
		if !failing {
			hs.ok(d)
		}
	}
}

// failing records a region that fails every event with 500.
func (hs *health) failing(d *Deliverer, what, hint string) {
	hs.problem(d, StateFailing, what, hint)
}

func (hs *health) problem(d *Deliverer, state, what, hint string) {
	now := d.now()
	hs.mu.Lock()
	h := &hs.h
	// Not the error text: it may name an ephemeral port and change on
	// every attempt of one and the same problem.
	changed := h.State != state || h.Hint != hint
	if h.State != state {
		h.Since, h.Attempts = now, 0
	}
	h.State, h.Error, h.Hint = state, what, hint
	h.Attempts++
	snap := *h
	d.m.setState(state)
	logNow := changed || now.Sub(hs.lastLog) >= d.link.Load().cfg.WarnEvery
	if logNow {
		hs.lastLog = now
	}
	hs.mu.Unlock()
	if !logNow {
		return
	}
	lvl := zerolog.WarnLevel
	if state != StateOutage {
		lvl = zerolog.ErrorLevel
	}
	e := d.log.WithLevel(lvl).Str("state", state).Str("error", what).Int("queued", d.depth())
	if hint != "" {
		e = e.Str("hint", hint)
	}
	down := now.Sub(snap.Since).Round(time.Second)
	switch {
	case changed && state == StateOutage:
		e.Msg("region delivery failed; retrying until it answers")
	case changed && state == StateConfig:
		e.Msgf("region delivery failed: %s; retrying, nothing is dead-lettered", hint)
	case changed:
		e.Msgf("region delivery failing: %s", hint)
	case state == StateOutage:
		e.Int("failed_attempts", snap.Attempts).Dur("down_for", down).
			Msgf("region unreachable for %s, %s events queued", down, d.depthString())
	default:
		e.Int("failed_attempts", snap.Attempts).Dur("down_for", down).
			Msgf("region delivery failing for %s, %s events queued: %s", down, d.depthString(), hint)
	}
}

func (hs *health) ok(d *Deliverer) {
	now := d.now()
	hs.mu.Lock()
	was := hs.h
	hs.h = Health{State: StateOK}
	d.m.setState(StateOK)
	hs.mu.Unlock()
	switch was.State {
	case StateOK, StateUnknown:
		return
	}
	down := now.Sub(was.Since).Round(time.Millisecond)
	d.log.Info().Str("was", was.State).Dur("down_for", down).Int("failed_attempts", was.Attempts).Int("queued", d.depth()).
		Msgf("region reachable again after %s", down)
}

// awaiting records, and logs, a link that waits for its credential
// files (Config.AwaitCredentials) from when it is put in use, before any
// event asks for it: status says why nothing will be delivered. Nothing
// is attempted meanwhile, so nothing else is logged.
func (hs *health) awaiting(d *Deliverer, l *link) {
	hs.mu.Lock()
	since := d.now()
	if hs.h.State == StateWaiting {
		since = hs.h.Since // another file missing now (MAAS writing them): the same wait
	}
	hs.h = Health{State: StateWaiting, Error: l.awaiting.Error(), Hint: l.cfg.AwaitCredentials, Since: since}
	d.m.setState(StateWaiting)
	hs.mu.Unlock()
	d.log.Warn().Str("url", l.cfg.URL).Str("error", l.awaiting.Error()).Int("queued", d.depth()).
		Msgf("not delivering yet: %s", l.cfg.AwaitCredentials)
}

// awaitFailed records why files that came for an awaiting link cannot be
// used (a reload refused: a key the agent may not read, a certificate
// and key that do not make a pair), which the awaiting hint ("is it
// registered?") no longer tells.
func (hs *health) awaitFailed(d *Deliverer, err error) {
	hs.mu.Lock()
	since := hs.h.Since
	hs.h = Health{State: StateConfig, Error: err.Error(), Hint: "the region's credential files are there now, but cannot be used: mend them; the agent follows them", Since: since}
	d.m.setState(StateConfig)
	hs.mu.Unlock()
}

// awaited ends awaiting's state once a link with its files is in use:
// unknown until the next attempt says more.
func (hs *health) awaited(d *Deliverer) {
	hs.mu.Lock()
	hs.h = Health{State: StateUnknown}
	d.m.setState(StateUnknown)
	hs.mu.Unlock()
	d.log.Info().Int("queued", d.depth()).Msg("the region's credential files are there now: delivering")
}

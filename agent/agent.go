// Package agent is the `leasekeeper agent` process: it runs the agent's
// parts (hook socket, spool drain, outbox, delivery, reconciler — each in
// its own subpackage) as tasks under one errgroup, serves /metrics,
// /healthz and /status on metrics.listen, the dead letters on the control
// socket (control.go), and talks to
// systemd: READY=1 once every task is ready, STATUS= with the queue depth,
// watchdog pings while every task makes progress, STOPPING=1 on the way
// out.
//
// Signals are not handled here: the command cancels Run's context on
// SIGTERM and calls Reload on SIGHUP and when a file the configuration is
// built from changed (internal/cli, agent.go).
package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/agent/outbox"
	"github.com/leasekeeper/leasekeeper/systemd"
)

// Task is one long-running part of the agent. Run calls ready once the
// part does its job (socket bound, store open, …) and returns when ctx
// ends — nil then, whatever ctx.Err() is. An error stops the agent.
// Returning nil earlier means the task is finished (a one-shot job); it
// then counts as ready and the others go on.
type Task interface {
	Run(ctx context.Context, ready func()) error
}

// TaskFunc adapts a function to Task.
type TaskFunc func(ctx context.Context, ready func()) error

// Run calls f.
func (f TaskFunc) Run(ctx context.Context, ready func()) error { return f(ctx, ready) }

// Prober is implemented by tasks whose main loop could wedge (a stuck
// write, a deadlock). LastProgress is when the loop last went round; it
// must go round at least every watchdog interval / 2 even when idle (use
// a read deadline or a ticker), or systemd's watchdog restarts the agent.
// A zero time means "not started yet" and counts as healthy.
type Prober interface {
	LastProgress() time.Time
}

// Reloader is implemented by tasks that apply a new configuration on
// SIGHUP without a restart. Reload prepares cfg and returns what puts it
// in force, or why it cannot; it changes nothing itself, so that a
// reload one part refuses leaves every part as it was. Both run
// concurrently with Run.
type Reloader interface {
	Reload(cfg *config.Config) (apply func(), err error)
}

// Status is what `leasekeeper status` and systemd's STATUS= report. The
// methods must be cheap (no I/O) and safe for concurrent use;
// *outbox.Store has Depth and DeadLetterCount, the deliverer knows
// LastDelivery.
type Status interface {
	Depth() int              // events queued for the region
	LastDelivery() time.Time // when the region last accepted a batch; zero if never
	DeadLetterCount() int    // events the region refused, kept for an operator
}

// Lagger is optionally implemented by a Status: OldestPending is when the
// oldest queued event was accepted (zero when the queue is empty), and
// lag_seconds is the time since. Without it lag is not reported.
type Lagger interface {
	OldestPending() time.Time
}

// DeadLetters is the dead-letter store behind /deadletters
// (*outbox.Store). Retry and Drop return an error wrapping
// outbox.ErrNotFound for an unknown seq.
type DeadLetters interface {
	DeadLetters() ([]outbox.DeadLetter, error)
	RetryDeadLetter(seq uint64) error
	DropDeadLetter(seq uint64) error
}

// Defaults for the Agent's tunables.
const (
	DefaultStopTimeout = 30 * time.Second
	DefaultStatusEvery = 5 * time.Second
)

// Agent is the process: its tasks, its HTTP listener and its link to
// systemd. Set the exported fields and call Add before Run.
type Agent struct {
	Version string
	// Notifier talks to systemd (New sets systemd.NewNotifier()).
	Notifier *systemd.Notifier
	// StopTimeout bounds how long Run waits for the tasks once its
	// context ends (or a task failed); then it returns an error naming the
	// tasks still running. Under systemd keep it below TimeoutStopSec.
	StopTimeout time.Duration
	// StatusEvery is how often STATUS= is refreshed.
	StatusEvery time.Duration

	cfg *config.Config
	// initial is the configuration the agent started with (RestartPending).
	initial *config.Config
	root    zerolog.Logger // as given: components derive from it
	log     zerolog.Logger // component=agent
	reg     Registry
	now     func() time.Time

	tasks   []*taskState
	status  Status
	dead    DeadLetters
	orphans Orphans

	cfgMu sync.Mutex // guards cfg after Run started

	started  atomic.Int64 // Unix ns; 0 until Run
	ready    atomic.Bool
	readyCh  chan struct{}
	addrMu   sync.Mutex
	addr     net.Addr
	addrCh   chan struct{}
	running  atomic.Bool
	unwedged atomic.Bool // last answer to the watchdog, to log transitions only
}

type taskState struct {
	name  string
	task  Task
	state atomic.Int32 // taskStarting, taskReady, taskFinished
}

const (
	taskStarting int32 = iota
	taskReady
	taskFinished
)

var taskStateNames = [...]string{"starting", "ready", "finished"}

// Registry receives the agent's metrics and serves them on /metrics: a
// *prometheus.Registry, or something wrapping one.
type Registry interface {
	prometheus.Registerer
	prometheus.Gatherer
}

// New returns an agent for cfg (a validated config). log is the root
// logger (the agent adds component fields); reg receives the agent's
// metrics and is served on /metrics (nil: a new registry); now is the
// clock (nil: time.Now).
func New(cfg *config.Config, log zerolog.Logger, reg Registry, now func() time.Time) (*Agent, error) {
	if cfg == nil {
		return nil, errors.New("agent: no config")
	}
	if r, ok := reg.(*prometheus.Registry); reg == nil || ok && r == nil {
		reg = prometheus.NewRegistry()
	}
	if now == nil {
		now = time.Now
	}
	a := &Agent{
		cfg:      cfg,
		initial:  cfg,
		root:     log,
		log:      log.With().Str("component", "agent").Logger(),
		reg:      reg,
		now:      now,
		readyCh:  make(chan struct{}),
		addrCh:   make(chan struct{}),
		Notifier: systemd.NewNotifier(),
	}
	a.unwedged.Store(true)
	return a, nil
}

// Add registers a task under a name used in logs, errors, STATUS= and
// /status. Call before Run.
func (a *Agent) Add(name string, t Task) {
	if a.running.Load() {
		panic("agent: Add after Run")
	}
	a.tasks = append(a.tasks, &taskState{name: name, task: t})
}

// SetStatus sets what /status and STATUS= report. Call before Run.
func (a *Agent) SetStatus(s Status) { a.status = s }

// SetDeadLetters sets the store behind /deadletters. Call before Run.
func (a *Agent) SetDeadLetters(d DeadLetters) { a.dead = d }

// reloadable are the keys Reload puts in force without a restart: the
// deliverer's (ReloadableRegionKeys), the release gate's token, the
// orphans releaser's [maas], and log.level, which the caller applies.
// A task that implements Reloader and applies more lists them here, so
// that neither the log nor /status asks for a restart for them.
var reloadable = func() map[string]bool {
	m := map[string]bool{"log.level": true, "release.token_file": true, "maas.api_url": true, "maas.api_key_file": true, "maas.ca_file": true}
	for _, k := range ReloadableRegionKeys {
		m[k] = true
	}
	return m
}()

// Reloadable reports whether a change of key takes effect at a reload.
func Reloadable(key string) bool { return reloadable[key] }

// ReloadableKeys are the keys a reload puts in force, sorted.
func ReloadableKeys() []string { return slices.Sorted(maps.Keys(reloadable)) }

// RestartPending are the keys whose value in force differs from the one
// the agent started with and that take effect at a restart only
// (changed by a reload since), in config.Diff's order.
func (a *Agent) RestartPending() []string {
	var out []string
	for _, k := range config.Diff(a.initial, a.Config()) {
		if !Reloadable(k) {
			out = append(out, k)
		}
	}
	return out
}

// Config is the configuration in force (the last one Reload accepted).
func (a *Agent) Config() *config.Config {
	a.cfgMu.Lock()
	defer a.cfgMu.Unlock()
	return a.cfg
}

// Ready is closed once every task is ready and READY=1 was sent.
func (a *Agent) Ready() <-chan struct{} { return a.readyCh }

// MetricsAddr waits until the HTTP listener is bound (or ctx ends) and
// returns its address: what metrics.listen resolved to ("127.0.0.1:0"
// in tests gives a free port).
func (a *Agent) MetricsAddr(ctx context.Context) (net.Addr, error) {
	select {
	case <-a.addrCh:
		a.addrMu.Lock()
		defer a.addrMu.Unlock()
		return a.addr, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Run runs every task and the HTTP listener until ctx ends or one fails,
// then waits for all of them (at most StopTimeout). It returns nil after a
// clean stop and the first task's error otherwise. Run may be called once.
func (a *Agent) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("agent: Run called twice")
	}
	if a.Notifier == nil {
		a.Notifier = systemd.NewNotifier()
	}
	if a.Notifier.OnPingError == nil {
		a.Notifier.OnPingError = func(err error) { a.log.Warn().Err(err).Msg("watchdog ping failed") }
	}
	if a.StopTimeout <= 0 {
		a.StopTimeout = DefaultStopTimeout
	}
	if a.StatusEvery <= 0 {
		a.StatusEvery = DefaultStatusEvery
	}
	if err := a.registerMetrics(); err != nil {
		return err
	}
	cfg := a.Config()
	if cfg.Metrics.Listen != "" {
		a.tasks = append(a.tasks, &taskState{name: "http", task: TaskFunc(a.serveHTTP)})
	} else {
		a.log.Info().Msg("metrics.listen is empty: no /metrics, /healthz or /status over TCP")
		close(a.addrCh)
	}
	if cfg.Control.Socket != "" {
		a.tasks = append(a.tasks, &taskState{name: "control", task: TaskFunc(a.serveControl)})
	} else {
		a.log.Info().Msg("control.socket is empty: `leasekeeper deadletter` works on the state directory only while the agent is stopped")
	}
	if cfg.DHCPD.Leases6 == "" && cfg.DHCPD.Config6 != "" {
		a.log.Warn().Str("dhcpd.config6", cfg.DHCPD.Config6).Msg(config6Alone)
	}
	a.started.Store(a.now().UnixNano())
	a.log.Info().Str("version", a.Version).Strs("tasks", a.taskNames(nil)).Msg("starting")

	g, gctx := errgroup.WithContext(ctx)
	allReady := make(chan struct{})
	var pending atomic.Int32
	pending.Store(int32(len(a.tasks)))
	setReady := func(ts *taskState) {
		if ts.state.CompareAndSwap(taskStarting, taskReady) && pending.Add(-1) == 0 {
			close(allReady)
		}
	}
	if len(a.tasks) == 0 {
		close(allReady)
	}
	for _, ts := range a.tasks {
		g.Go(func() error {
			log := a.log.With().Str("task", ts.name).Logger()
			err := ts.task.Run(gctx, func() {
				if ts.state.Load() == taskStarting {
					log.Debug().Msg("task ready")
				}
				setReady(ts)
			})
			if err == nil && gctx.Err() == nil {
				log.Info().Msg("task finished")
				setReady(ts) // a one-shot job that is done is as good as ready
			}
			ts.state.Store(taskFinished)
			switch {
			case err != nil && gctx.Err() != nil && errors.Is(err, context.Canceled):
				return nil // stopped as asked
			case err != nil:
				return fmt.Errorf("%s: %w", ts.name, err)
			}
			return nil
		})
	}
	g.Go(func() error { return a.supervise(gctx, allReady) })
	g.Go(func() error { return a.watchdog(gctx) })

	done := make(chan error, 1)
	go func() { done <- g.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-gctx.Done():
		select {
		case err = <-done:
		case <-time.After(a.StopTimeout):
			err = fmt.Errorf("agent: %s still running %s after stop was asked", strings.Join(a.taskNames(func(ts *taskState) bool {
				return ts.state.Load() != taskFinished
			}), ", "), a.StopTimeout)
		}
	}
	if err != nil {
		a.log.Error().Err(err).Msg("stopped")
	} else {
		a.log.Info().Msg("stopped")
	}
	return err
}

func (a *Agent) taskNames(keep func(*taskState) bool) []string {
	var names []string
	for _, ts := range a.tasks {
		if keep == nil || keep(ts) {
			names = append(names, ts.name)
		}
	}
	return names
}

// supervise sends READY=1 once all tasks are ready, refreshes STATUS=,
// and sends STOPPING=1 when the group's context ends.
func (a *Agent) supervise(ctx context.Context, allReady <-chan struct{}) error {
	t := time.NewTicker(a.StatusEvery)
	defer t.Stop()
	waiting := allReady
	for {
		select {
		case <-ctx.Done():
			a.notify("stopping", a.Notifier.Stopping)
			a.notify("status", func() error { return a.Notifier.Status("stopping: " + a.statusLine()) })
			return nil
		case <-waiting:
			waiting = nil
			if ctx.Err() != nil {
				continue // tasks returning on the way out are not ready
			}
			a.ready.Store(true)
			a.notify("ready", a.Notifier.Ready)
			close(a.readyCh)
			a.log.Info().Dur("startup", a.now().Sub(time.Unix(0, a.started.Load()))).Msg("ready")
			a.notify("status", func() error { return a.Notifier.Status(a.statusLine()) })
		case <-t.C:
			line := a.statusLine()
			if waiting != nil {
				line = "starting: waiting for " + strings.Join(a.taskNames(func(ts *taskState) bool {
					return ts.state.Load() == taskStarting
				}), ", ")
			}
			a.notify("status", func() error { return a.Notifier.Status(line) })
		}
	}
}

// notify logs a failed sd_notify; it never stops the agent.
func (a *Agent) notify(what string, f func() error) {
	if err := f(); err != nil {
		a.log.Warn().Err(err).Str("notify", what).Msg("systemd notification failed")
	}
}

// statusLine is the STATUS= text.
func (a *Agent) statusLine() string {
	if a.status == nil {
		return "running"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "queue %d, dead letters %d, last delivery ", a.status.Depth(), a.status.DeadLetterCount())
	if t := a.status.LastDelivery(); t.IsZero() {
		b.WriteString("never")
	} else {
		fmt.Fprintf(&b, "%s ago", a.now().Sub(t).Round(time.Second))
	}
	if g, ok := a.status.(Regioner); ok {
		if r := g.RegionReport(); r != nil && r.Trouble() {
			fmt.Fprintf(&b, "; region %s (leasekeeper status)", r.Words().Label)
		}
	}
	return b.String()
}

// watchdog pings systemd while every task with a Prober made progress
// within the watchdog interval.
func (a *Agent) watchdog(ctx context.Context) error {
	interval, err := a.Notifier.WatchdogInterval()
	if err != nil {
		a.log.Warn().Err(err).Msg("watchdog settings unreadable; not pinging")
		return nil
	}
	if interval <= 0 {
		return nil
	}
	a.log.Info().Dur("interval", interval).Msg("systemd watchdog on")
	return a.Notifier.Watchdog(ctx, interval, func() bool {
		err := a.healthy(interval)
		switch {
		case err == nil && !a.unwedged.Swap(true):
			a.log.Info().Msg("every task makes progress again; watchdog pings resumed")
		case err != nil && a.unwedged.Swap(false):
			a.log.Error().Err(err).Msg("task wedged: withholding watchdog pings")
		}
		return err == nil
	})
}

// healthy says which tasks made no progress within limit, if any.
func (a *Agent) healthy(limit time.Duration) error {
	now := a.now()
	var stuck []string
	for _, ts := range a.tasks {
		p, ok := ts.task.(Prober)
		if !ok || ts.state.Load() == taskFinished {
			continue
		}
		if last := p.LastProgress(); !last.IsZero() && now.Sub(last) > limit {
			stuck = append(stuck, fmt.Sprintf("%s (%s)", ts.name, now.Sub(last).Round(time.Millisecond)))
		}
	}
	if len(stuck) == 0 {
		return nil
	}
	return fmt.Errorf("no progress: %s", strings.Join(stuck, ", "))
}

// Reload puts cfg in force: it tells systemd (RELOADING=1, then READY=1)
// and hands cfg to every task that implements Reloader; only when every
// one of them can take it is it applied, to all of them and to Config.
// Otherwise it returns their errors joined and nothing changes. The
// caller validated cfg, and applies what it owns (the log level) itself
// once Reload succeeded.
func (a *Agent) Reload(cfg *config.Config) error {
	a.notify("reloading", a.Notifier.Reloading)
	defer func() {
		if a.ready.Load() {
			a.notify("ready", a.Notifier.Ready)
		}
	}()
	var (
		errs    []error
		applies []func()
	)
	for _, ts := range a.tasks {
		if r, ok := ts.task.(Reloader); ok {
			apply, err := r.Reload(cfg)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", ts.name, err))
				continue
			}
			applies = append(applies, apply)
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...) // nothing applied: the running configuration stays
	}
	a.cfgMu.Lock()
	a.cfg = cfg
	a.cfgMu.Unlock()
	for _, apply := range applies {
		apply()
	}
	return nil
}

func (a *Agent) registerMetrics() error {
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "leasekeeper_build_info",
			Help:        "Always 1; the labels say which build is running.",
			ConstLabels: prometheus.Labels{"version": a.Version, "goversion": runtime.Version()},
		}, func() float64 { return 1 }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leasekeeper_ready",
			Help: "1 once every part of the agent is running (systemd READY=1 was sent).",
		}, func() float64 {
			if a.ready.Load() {
				return 1
			}
			return 0
		}),
	}
	for _, c := range cs {
		if err := a.reg.Register(c); err != nil {
			return fmt.Errorf("agent: metrics: %w", err)
		}
	}
	return nil
}

// serveHTTP is the HTTP listener task.
func (a *Agent) serveHTTP(ctx context.Context, ready func()) error {
	listen := a.Config().Metrics.Listen
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", listen)
	if err != nil {
		close(a.addrCh)
		return fmt.Errorf("metrics.listen: %w", err)
	}
	a.addrMu.Lock()
	a.addr = ln.Addr()
	a.addrMu.Unlock()
	close(a.addrCh)

	log := a.root.With().Str("component", "http").Logger()
	srv := &http.Server{
		Handler:           a.handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          newStdLog(log),
	}
	log.Info().Str("listen", ln.Addr().String()).Msg("serving /metrics, /healthz, /status")
	ready()
	return serve(ctx, "http", srv, ln)
}

// serve runs srv on ln until ctx ends, then shuts it down within 5 s
// (requests in flight finish) and returns; a failing Serve is an error.
func serve(ctx context.Context, name string, srv *http.Server, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("%s: %w", name, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// taskReport lists the task states for /status, in Add order.
func (a *Agent) taskReport() []TaskReport {
	out := make([]TaskReport, 0, len(a.tasks))
	for _, ts := range a.tasks {
		out = append(out, TaskReport{Name: ts.name, State: taskStateNames[ts.state.Load()]})
	}
	return slices.Clip(out)
}

// config6Alone is what the agent says when dhcpd.config6 is set and
// dhcpd.leases6 is not: dhcpd.config6 is read only for the mode of the
// reconciler that follows dhcpd.leases6 (and by check-maas).
const config6Alone = "dhcpd.config6 is set but dhcpd.leases6 is not: DHCPv6 leases are not followed, and DHCPv6 events reach the region only from hooks running leasekeeper-hook (leasekeeper6.conf; MAAS's dhcpd6.conf runs none); set dhcpd.leases6 to dhcpd -6's leases file to follow it"

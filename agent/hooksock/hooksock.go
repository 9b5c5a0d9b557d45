// Package hooksock receives the datagrams leasekeeper-hook (or MAAS's
// maas-dhcp-helper) sends for every lease event dhcpd runs a hook for, and
// hands them, validated and in arrival order, to the agent's sink (the
// durable outbox).
//
// Every datagram is read whole into a 64 KiB buffer (a longer one is
// reported as truncated, never parsed in part); the sender's credentials
// (SO_PASSCRED) are checked against the allowed uids; a malformed or
// rejected datagram is counted and logged with rate limiting and never
// affects its neighbours.
//
// The socket is created at the configured path, or inherited from systemd
// socket activation (a leasekeeper.socket unit, LISTEN_FDS). Activation is
// the durable setup: the socket, and the datagrams queued in it, outlive an
// agent restart or crash. Datagrams are read with MSG_PEEK (SO_PEEK_OFF)
// and taken off the socket only once their batch is in the outbox, so a
// crash in between loses none: the next run stores them again (at most
// duplicates). Without SO_PEEK_OFF (an old kernel; logged), or with a
// socket the agent made itself (gone with it), a crash between reading a
// datagram and the outbox's commit of its batch (one group commit,
// milliseconds) loses it; the leases-file reconciler re-derives such an
// event from dhcpd.leases, so the region still converges. Neither the
// socket's queue nor the spool survives a power cut: an event counts as
// accepted once the outbox has it (fsync'd).
package hooksock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/leasekeeper/leasekeeper/agent/event"
	"github.com/leasekeeper/leasekeeper/internal/lograte"
	"github.com/leasekeeper/leasekeeper/internal/sockgroup"
)

// MaxDatagram is the largest datagram read whole.
const MaxDatagram = 64 << 10

// Why a datagram or spool line is refused: leasekeeper_rejected_datagrams_total's
// reason.
const (
	rejectTruncated      = "truncated"       // a datagram longer than MaxDatagram
	rejectNoCredentials  = "no-credentials"  // no sender credentials came with it
	rejectUID            = "uid"             // a sender not in hook.allowed_uids
	rejectMalformed      = "malformed"       // not an event
	rejectTimestamp      = "timestamp"       // an event whose time cannot be right
	rejectSpoolRefused   = "spool-refused"   // a spool file not read at all (moved aside, or removed)
	rejectSpoolOverlong  = "spool-overlong"  // a spool line too long, skipped
	rejectSpoolMalformed = "spool-malformed" // a spool line that is not an event
	rejectSpoolTimestamp = "spool-timestamp" // a spool line whose time cannot be right
)

// rejectReasons are every reason.
var rejectReasons = []string{rejectTruncated, rejectNoCredentials, rejectUID, rejectMalformed, rejectTimestamp,
	rejectSpoolRefused, rejectSpoolOverlong, rejectSpoolMalformed, rejectSpoolTimestamp}

// Sink takes accepted events; it returns once they are durable.
type Sink interface {
	Accept(ctx context.Context, evs []event.Event) error
}

// Router is a Sink made of several (the agent's reconcilers, one per
// address family). Part names the sink of each event, 0 to Sinks()-1,
// and the listener hands each sink its events in the order read. A sink
// that fails is retried alone: the parts already stored are not handed
// again, so that no event is stored twice — unless the listener stops
// while a part still fails: its datagrams stay unread, and the next run
// stores every part of them again, as after a crash between storing
// events and consuming their datagrams.
type Router interface {
	Sinks() []Sink
	Part(ev event.Event) int
}

// Config is the hook socket's part of the agent configuration.
type Config struct {
	Path        string   // socket path
	Group       string   // group owning the socket (dhcpd's), "" to keep the agent's
	AllowedUIDs []uint32 // senders allowed; empty allows any
	// Spool is the directory the hook appends to when it cannot send
	// (see the hook's doc); "" disables draining.
	Spool string
	// Batch bounds how many events go to the sink at once.
	Batch int
}

// Listener is the hook socket task.
type Listener struct {
	cfg     Config
	sink    Sink
	log     zerolog.Logger
	now     func() time.Time
	m       metrics
	limiter *lograte.Limiter
	// failing logs a sink that keeps failing (a full disk) when it
	// begins, every storeFailLogEvery while it lasts, and when it ends.
	failing *lograte.Episode
	// spoolFailing logs a spool the agent cannot drain (a directory or
	// a file its user may not read, an I/O error) the same way.
	spoolFailing *lograte.Episode
	// progress is how far the taken spool file was handed on, so that a
	// drain stopped by a read error, or a drained file that could not be
	// removed, is not stored again at every retry. spoolBad: the last
	// drain failed (spoolTrouble); Drained waits for a good one.
	progress spoolProgress
	spoolBad bool
	// spoolRead wraps a taken spool file's reads (tests: a read error).
	spoolRead func(io.Reader) io.Reader

	beat       atomic.Int64 // Unix ns: the reader's last turn
	heldSince  atomic.Int64 // Unix ns: since when events wait for a failing sink; 0 if none
	heldEvents atomic.Int64

	drained chan struct{} // closed once the spool found at start is stored
}

// Drained is closed once the events spooled while nobody listened, and
// the datagrams queued in the socket when Run started, are stored
// (handed to the sink, which queued or dropped them). A spool that cannot
// be drained (spoolTrouble) keeps it open until a drain goes through; the
// reconciler waits for it only so long (AwaitBacklog). A Run that ends
// first never closes it.
func (l *Listener) Drained() <-chan struct{} { return l.drained }

// closeDrained closes Drained once.
func (l *Listener) closeDrained() {
	select {
	case <-l.drained:
	default:
		close(l.drained)
	}
}

// LastProgress is when the hook socket last made progress (agent.Prober):
// the reader's last turn (it wakes at least every second), or, while
// events wait for an outbox that cannot store them (a full disk), when
// they began to wait. A wedged reader or a held outbox thus turns the
// agent's health and the watchdog bad after a while.
func (l *Listener) LastProgress() time.Time {
	if ns := l.heldSince.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	if ns := l.beat.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Held is how many events read from the socket or the spool wait, in
// memory, for the outbox to take them, and since when (0, zero time when
// none). Their datagrams stay in the socket meanwhile.
func (l *Listener) Held() (int, time.Time) {
	ns := l.heldSince.Load()
	if ns == 0 {
		return 0, time.Time{}
	}
	return int(l.heldEvents.Load()), time.Unix(0, ns)
}

type metrics struct {
	received        *prometheus.CounterVec
	rejected        *prometheus.CounterVec
	spoolUnreadable prometheus.Gauge
}

// New returns a listener; Run opens the socket.
func New(cfg Config, sink Sink, log zerolog.Logger, reg prometheus.Registerer, now func() time.Time) (*Listener, error) {
	if cfg.Path == "" {
		return nil, errors.New("hook.socket: no path")
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 512
	}
	if now == nil {
		now = time.Now
	}
	l := &Listener{cfg: cfg, sink: sink, log: log, now: now, limiter: lograte.New(10*time.Second, now),
		failing: lograte.NewEpisode(storeFailLogEvery, now), spoolFailing: lograte.NewEpisode(storeFailLogEvery, now), drained: make(chan struct{})}
	l.m.received = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasekeeper_events_received_total", Help: "Lease events accepted, by source.",
	}, []string{"source"})
	l.m.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leasekeeper_rejected_datagrams_total", Help: "Hook datagrams refused, by reason.",
	}, []string{"reason"})
	// Every reason from 0, so that the first refusal is an increase.
	for _, r := range rejectReasons {
		l.m.rejected.WithLabelValues(r)
	}
	l.m.spoolUnreadable = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "leasekeeper_hook_spool_unreadable",
		Help: "1 while the hook spool (hook.spool) cannot be drained: a directory or file the agent's user may not read or rename, or an I/O error; its events wait there, and the hooks keep appending to it.",
	})
	if reg != nil {
		for _, c := range []prometheus.Collector{l.m.received, l.m.rejected, l.m.spoolUnreadable} {
			if err := reg.Register(c); err != nil {
				var are prometheus.AlreadyRegisteredError
				if !errors.As(err, &are) {
					return nil, err
				}
			}
		}
	}
	return l, nil
}

// Received is the counter the other sources (spool, reconciler) share.
func (l *Listener) Received() *prometheus.CounterVec { return l.m.received }

// Run receives until ctx ends. ready is called once the socket listens.
func (l *Listener) Run(ctx context.Context, ready func()) error {
	conn, own, err := l.open()
	if err != nil {
		return err
	}
	inherited := own == nil
	defer func() {
		// Removed while still bound: an agent starting meanwhile finds
		// the socket listened on and refuses, and the bound socket keeps
		// its file's inode (so its number) from being reused.
		if !inherited {
			removeOwn(l.cfg.Path, own)
		}
		conn.Close()
	}()
	l.log.Info().Str("socket", l.cfg.Path).Bool("activated", inherited).Msg("hook socket listening")
	ready()

	sk, err := newSock(conn)
	if err != nil {
		return err
	}
	if !sk.peek {
		l.log.Warn().Msg("SO_PEEK_OFF unavailable: a crash can lose the events read but not yet stored (the reconciler recovers them from dhcpd.leases)")
	}
	// The reader never waits for the disk: it hands events to the
	// committer, which takes whatever has gathered as one batch (one
	// fsync) and then consumes their datagrams.
	events := make(chan item, 4*l.cfg.Batch)
	errc := make(chan error, 1)
	go func() { errc <- l.commit(ctx, sk, events) }()
	stop := context.AfterFunc(ctx, func() {
		conn.SetReadDeadline(time.Now()) // wake a reader waiting on the poller
	})
	defer stop()
	// Events the hooks spooled while nobody listened come first, and
	// Drained covers those queued in the socket too (an activated socket
	// outlives the agent), spool or not.
	if err = l.drainSpool(ctx, sk, events); err == nil {
		err = l.readQueued(ctx, sk, events)
	}
	if err == nil {
		if err = stored(ctx, events); err == nil && ctx.Err() == nil && !l.spoolBad {
			l.closeDrained()
		}
	}
	if err == nil {
		err = l.read(ctx, sk, events)
	}
	close(events)
	if cerr := <-errc; err == nil {
		err = cerr
	}
	return err
}

// sameSocket checks that the socket systemd passed is hook.socket: the
// hooks send to the path they are given, the agent's hook.socket, and an
// agent reading a socket at another path (leasekeeper.socket's
// ListenDatagram= left as it was when hook.socket changed) would never
// hear them. Either name may reach the other through a symbolic link
// (/var/run is /run).
func (l *Listener) sameSocket(uc *net.UnixConn) error {
	a, _ := uc.LocalAddr().(*net.UnixAddr)
	switch {
	case a == nil || a.Name == "":
		return &SocketMismatchError{Configured: l.cfg.Path, Passed: "an unnamed socket"}
	case filepath.Clean(a.Name) == filepath.Clean(l.cfg.Path):
		return nil
	case !strings.HasPrefix(a.Name, "@"): // not an abstract name: compare the files
		passed, perr := os.Stat(a.Name)
		configured, cerr := os.Stat(l.cfg.Path)
		if perr == nil && cerr == nil && os.SameFile(passed, configured) {
			return nil
		}
	}
	return &SocketMismatchError{Configured: l.cfg.Path, Passed: a.Name}
}

// SocketMismatchError is a socket systemd passed that is not hook.socket
// (sameSocket): a configuration error, which a restart does not mend.
type SocketMismatchError struct{ Configured, Passed string }

func (e *SocketMismatchError) Error() string {
	return fmt.Sprintf("hook.socket is %s, but systemd passed the hook socket %s (ListenDatagram= in leasekeeper.socket): hooks send to hook.socket, so this agent would never hear them; make the two the same and restart leasekeeper.socket", e.Configured, e.Passed)
}

// open creates the socket or takes the one systemd passed. own is the
// socket file it created (nil for an activated socket): only that file is
// removed on exit.
func (l *Listener) open() (_ *net.UnixConn, own os.FileInfo, _ error) {
	for _, f := range activation.Files(true) {
		c, err := net.FilePacketConn(f)
		f.Close()
		if err != nil {
			continue
		}
		if uc, ok := c.(*net.UnixConn); ok {
			if err := l.sameSocket(uc); err != nil {
				uc.Close()
				return nil, nil, err
			}
			if on, err := passCredOn(uc); err == nil && !on {
				// Datagrams queued before this moment carry no
				// credentials and are refused.
				l.log.Warn().Msg("the activated hook socket lacks SO_PASSCRED: set PassCredentials=yes in its .socket unit, or events queued while the agent was down are refused")
			}
			if err := passCred(uc); err != nil {
				uc.Close()
				return nil, nil, err
			}
			return uc, nil, nil
		}
		c.Close()
	}
	// A group the agent may not give the socket to is refused before
	// anything is bound.
	gid := -1
	if l.cfg.Group != "" {
		var err error
		if gid, err = sockgroup.Lookup("hook.socket_group", l.cfg.Group); err != nil {
			return nil, nil, err
		}
	}
	// From the probe to the bind, no other agent starting on the same
	// path may come between: both would find the old socket stale, and
	// the later one's unlink would leave the earlier bound to a name no
	// hook reaches.
	unlock, err := lockDir(filepath.Dir(l.cfg.Path))
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	if fi, err := os.Lstat(l.cfg.Path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, nil, fmt.Errorf("hook.socket: %s exists and is not a socket; refusing to replace it", l.cfg.Path)
		}
		// A socket left by a previous run is replaced; one something
		// still listens on (another agent given the same hook.socket)
		// is not: unlinking it would leave that agent bound to a name
		// no hook can reach, and every event would go to the spool.
		if err := probe(l.cfg.Path); err != nil {
			return nil, nil, err
		}
		os.Remove(l.cfg.Path) // a stale socket from a previous run
	}
	// SO_PASSCRED before bind: a datagram sent in between would come
	// without credentials and be refused.
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_PASSCRED, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), "unixgram", l.cfg.Path)
	if err != nil {
		return nil, nil, fmt.Errorf("hook.socket: %w", err)
	}
	uc := pc.(*net.UnixConn)
	own, err = os.Lstat(l.cfg.Path)
	if err != nil {
		uc.Close()
		return nil, nil, fmt.Errorf("hook.socket: %w", err)
	}
	fail := func(err error) (*net.UnixConn, os.FileInfo, error) {
		removeOwn(l.cfg.Path, own)
		uc.Close()
		return nil, nil, err
	}
	if err := passCred(uc); err != nil {
		return fail(err)
	}
	mode := os.FileMode(0o622) // anyone may send; the uid check decides
	if gid >= 0 {
		if err := sockgroup.Give(l.cfg.Path, gid, "hook.socket_group", l.cfg.Group); err != nil {
			return fail(err)
		}
		mode = 0o620
	}
	if err := os.Chmod(l.cfg.Path, mode); err != nil {
		return fail(fmt.Errorf("hook.socket: %w", err))
	}
	if err := uc.SetReadBuffer(4 << 20); err != nil {
		l.log.Debug().Err(err).Msg("hook socket: cannot enlarge the receive buffer")
	}
	return uc, own, nil
}

// probe tells whether something is bound to the socket at path, without
// sending it anything: connecting a datagram socket only names the peer.
// It returns nil only when nobody is (a stale socket, or gone meanwhile).
func probe(path string) error {
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	switch {
	case err == nil:
		c.Close()
		return fmt.Errorf("hook.socket: %s: another process listens on it (another leasekeeper agent?); stop it or set hook.socket to another path", path)
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, fs.ErrNotExist):
		return nil
	case errors.Is(err, syscall.EPROTOTYPE):
		// A stream or seqpacket socket is bound there.
		return fmt.Errorf("hook.socket: %s: another process listens on it (not a datagram socket); stop it or set hook.socket to another path", path)
	default:
		return fmt.Errorf("hook.socket: %s: cannot tell whether another process listens on it (%w); refusing to replace it: remove it if nothing does, or set hook.socket to another path", path, err)
	}
}

// dirLockWait bounds how long lockDir waits for another holder.
const dirLockWait = 5 * time.Second

// lockDir takes an exclusive flock(2) on the directory dir (which leaves
// no file behind), waiting up to dirLockWait; unlock releases it.
func lockDir(dir string) (unlock func(), _ error) {
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("hook.socket: %w", &fs.PathError{Op: "open", Path: dir, Err: err})
	}
	deadline := time.Now().Add(dirLockWait)
	for {
		err = syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { syscall.Close(fd) }, nil
		}
		if err != syscall.EWOULDBLOCK && err != syscall.EINTR || time.Now().After(deadline) {
			syscall.Close(fd)
			if err == syscall.EWOULDBLOCK {
				return nil, fmt.Errorf("hook.socket: directory %s stayed locked (flock) by another process for %s; is another agent starting on hook.socket?", dir, dirLockWait)
			}
			return nil, fmt.Errorf("hook.socket: lock %s: %w", dir, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// removeOwn removes the socket file at path if it is still the one this
// agent bound (own), not one another agent has put there since. Call it
// before closing the socket, which pins own's inode until then.
func removeOwn(path string, own os.FileInfo) {
	if fi, err := os.Lstat(path); err == nil && os.SameFile(fi, own) {
		os.Remove(path)
	}
}

// passCredOn reports whether SO_PASSCRED is set on the socket.
func passCredOn(uc *net.UnixConn) (bool, error) {
	rc, err := uc.SyscallConn()
	if err != nil {
		return false, err
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		v, gerr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_PASSCRED)
	}); err != nil {
		return false, err
	}
	return v != 0, gerr
}

func passCred(uc *net.UnixConn) error {
	rc, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_PASSCRED, 1)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("hook socket: SO_PASSCRED: %w", serr)
	}
	return nil
}

// spoolCheck is how often the reader looks for a spool file.
const spoolCheck = time.Second

func (l *Listener) read(ctx context.Context, sk *sock, out chan<- item) error {
	buf := make([]byte, MaxDatagram+1)
	oob := make([]byte, syscall.CmsgSpace(syscall.SizeofUcred))
	for ctx.Err() == nil {
		l.beat.Store(l.now().UnixNano())
		n, oobn, flags, err := sk.next(ctx, buf, oob, spoolCheck)
		switch {
		case err == errNoData:
			if err := l.drainSpool(ctx, sk, out); err != nil {
				return err
			}
			if !l.spoolBad && ctx.Err() == nil {
				select {
				case <-l.drained:
				default:
					// The spool found at start drains at last: Drained
					// once what it held is stored.
					if err := stored(ctx, out); err != nil || ctx.Err() != nil {
						return err // stopping: stored returned before the commit
					}
					l.closeDrained()
				}
			}
		case err != nil:
			return err
		default:
			l.handle(ctx, buf[:n], oob[:oobn], flags, out)
		}
	}
	return nil
}

// decode checks one datagram; reason is set when it is refused.
func (l *Listener) decode(b, oob []byte, flags int) (ev event.Event, reason string, err error) {
	if flags&syscall.MSG_TRUNC != 0 || len(b) > MaxDatagram {
		return ev, rejectTruncated, fmt.Errorf("datagram longer than %d bytes", MaxDatagram)
	}
	uid, ok := senderUID(oob)
	if !ok {
		return ev, rejectNoCredentials, errors.New("no sender credentials")
	}
	if len(l.cfg.AllowedUIDs) > 0 && !slices.Contains(l.cfg.AllowedUIDs, uid) {
		return ev, rejectUID, fmt.Errorf("sender uid %d not in hook.allowed_uids", uid)
	}
	ev, err = event.ParseDatagram(b, event.SourceHook)
	if err != nil {
		return ev, rejectMalformed, err
	}
	if err := checkTime(ev, l.now()); err != nil {
		return ev, rejectTimestamp, err
	}
	return ev, "", nil
}

// Event times the agent believes: from 2000 on, and at most a day ahead
// of its own clock (a hook runs on this machine, on this clock). A time
// outside is a broken clock or a forged datagram; the region would store
// it as the lease's start.
const (
	minTimestamp = 946684800 // 2000-01-01T00:00:00Z
	maxAhead     = 24 * time.Hour
)

func checkTime(ev event.Event, now time.Time) error {
	limit := now.Add(maxAhead).Unix()
	if ev.Timestamp < minTimestamp || ev.Timestamp > limit {
		return fmt.Errorf("timestamp %d is not between 2000-01-01 and a day from now", ev.Timestamp)
	}
	if ns := ev.TimestampNS; ns != 0 && (ns/1e9 < minTimestamp || ns/1e9 > limit) {
		return fmt.Errorf("timestamp_ns %d is not between 2000-01-01 and a day from now", ns)
	}
	return nil
}

func senderUID(oob []byte) (uint32, bool) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, false
	}
	for _, m := range msgs {
		if cred, err := syscall.ParseUnixCredentials(&m); err == nil {
			return cred.Uid, true
		}
	}
	return 0, false
}

// item is what the reader hands the committer: an event (ok) and the
// number of socket datagrams to consume once it is stored (a refused
// datagram rides on an item of its own), or a barrier (done set) that is
// answered once everything before it is stored.
type item struct {
	ev     event.Event
	ok     bool
	dgrams int
	done   chan<- error
}

// commit stores events in order, in batches, consuming their datagrams
// from the socket only once they are stored.
func (l *Listener) commit(ctx context.Context, sk *sock, in <-chan item) error {
	batch := make([]event.Event, 0, l.cfg.Batch)
	for it := range in {
		batch = batch[:0]
		dgrams := 0
		var barrier chan<- error
		add := func(it item) bool {
			if it.done != nil {
				barrier = it.done
				return false
			}
			if it.ok {
				batch = append(batch, it.ev)
			}
			dgrams += it.dgrams
			return true
		}
		if add(it) {
		gather:
			for len(batch) < l.cfg.Batch {
				select {
				case it, ok := <-in:
					if !ok || !add(it) {
						break gather
					}
				default:
					break gather
				}
			}
		}
		var err error
		if len(batch) > 0 {
			err = l.store(ctx, batch)
		}
		if err == nil {
			err = sk.consume(dgrams)
		}
		if barrier != nil {
			barrier <- err
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// stopGrace bounds how long a stopping agent keeps retrying a failing
// sink for events it has already read.
const stopGrace = 5 * time.Second

// storeFailLogEvery is how often a sink that keeps failing is logged
// again. It is retried every 5 s at most: logged each time, a full disk
// filled the journal (on that disk, often) with the same error, and the
// outbox's own, for as long as it lasted.
const storeFailLogEvery = 30 * time.Second

// store writes one batch, retrying a failing sink (a full disk) with
// backoff: the events wait in memory and the socket queue fills up, which
// makes the hooks spool instead. The sink is called even while stopping:
// what was read is written before the agent exits, within stopGrace.
func (l *Listener) store(ctx context.Context, batch []event.Event) error {
	backoff := 100 * time.Millisecond
	var deadline time.Time
	defer l.heldSince.Store(0)
	one := [1]part{{l.sink, batch}} // on the stack: a plain sink costs a batch no allocation
	parts := one[:]
	if r, ok := l.sink.(Router); ok {
		parts = route(r, batch)
	}
	for {
		var err error
		for len(parts) > 0 {
			if err = parts[0].sink.Accept(context.WithoutCancel(ctx), parts[0].evs); err != nil {
				break
			}
			for _, ev := range parts[0].evs {
				l.m.received.WithLabelValues(ev.Source.String()).Inc()
			}
			parts = parts[1:]
		}
		if err == nil {
			if ended, since, n := l.failing.End(); ended {
				l.log.Info().Int("events", len(batch)).Int("failures", n).Dur("failed_for", l.now().Sub(since)).
					Msg("hook events stored again")
			}
			return nil
		}
		left := 0
		for _, p := range parts {
			left += len(p.evs)
		}
		if ctx.Err() != nil {
			if deadline.IsZero() {
				deadline = l.now().Add(stopGrace)
			} else if l.now().After(deadline) {
				return fmt.Errorf("stopping with %d hook events not stored (the reconciler recovers them from its leases file): %w", left, err)
			}
		}
		l.heldEvents.Store(int64(left))
		l.heldSince.CompareAndSwap(0, l.now().UnixNano())
		if log, left, since := l.failing.Fail(); log {
			l.log.Error().Err(err).Int("events", int(l.heldEvents.Load())).Dur("retry_in", backoff).
				Time("failing_since", since).Int("not_logged_since_last", left).
				Msgf("cannot store hook events; holding them and retrying (logged again every %s while it lasts)", storeFailLogEvery)
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, 5*time.Second)
	}
}

// part is one sink's share of a batch.
type part struct {
	sink Sink
	evs  []event.Event
}

// AcceptAll is the Accept of a Router for a caller other than the
// listener: each sink takes its part of evs, in Sinks order. On error the
// parts before stay stored (the listener calls the parts itself, and
// retries only the one that failed).
func AcceptAll(ctx context.Context, r Router, evs []event.Event) error {
	for _, p := range route(r, evs) {
		if err := p.sink.Accept(ctx, p.evs); err != nil {
			return err
		}
	}
	return nil
}

// route splits batch by r's sinks.
func route(r Router, batch []event.Event) []part {
	sinks := r.Sinks()
	by := make([][]event.Event, len(sinks))
	for _, ev := range batch {
		i := r.Part(ev)
		by[i] = append(by[i], ev)
	}
	var out []part
	for i, evs := range by {
		if len(evs) > 0 {
			out = append(out, part{sinks[i], evs})
		}
	}
	return out
}

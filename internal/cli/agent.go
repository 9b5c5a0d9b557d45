package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/leasekeeper/leasekeeper/agent"
	"github.com/leasekeeper/leasekeeper/agent/config"
	"github.com/leasekeeper/leasekeeper/packaging"
	"github.com/leasekeeper/leasekeeper/systemd"
)

// reloadableList is agent.ReloadableKeys for --help, wrapped under the
// SIGHUP line.
func reloadableList() string {
	keys := agent.ReloadableKeys()
	const indent = "                   "
	var b strings.Builder
	line := indent
	for i, k := range keys {
		w := k
		if i < len(keys)-1 {
			w += ","
		} else {
			w += "."
		}
		if len(line)+1+len(w) > 79 && line != indent {
			b.WriteString(line + "\n")
			line = indent
		}
		if line != indent {
			line += " "
		}
		line += w
	}
	b.WriteString(line)
	return b.String()
}

func newAgentCmd(env *Env) *cobra.Command {
	var (
		configPath  string
		sets        []string
		logLevel    string
		printConfig bool
		printRef    bool
	)
	cmd := &cobra.Command{
		Use:   "agent [--config FILE] [--set section.key=value]...",
		Short: "Run the daemon that delivers every lease event to the region",
		Long: `Run the leasekeeper agent: receive lease events from leasekeeper-hook on
hook.socket, queue them durably in state.dir, deliver them in order to the
region's leases endpoint (region.url), and serve Prometheus /metrics and
/status on metrics.listen. It runs in the foreground and logs to stderr
(JSON under systemd's journal or when stderr is not a terminal).

Configuration is the TOML file --config. Every key, with its default and
what it does, is in the reference --print-reference prints (the package
installs it as /usr/share/doc/leasekeeper/examples/leasekeeper.toml). Unknown keys and bad values are
errors naming the key. --set section.key=value overrides one key for this
run (repeatable): strings as they are, durations in Go syntax ("30s"),
lists comma-separated ("0,108"; "https://r1:5242/…,https://r2:5242/…")
or as a TOML array (["https://r1:5242/…"]); an empty value empties a
list.

On a MAAS rack controller (the deb's /etc/maas/rackd.conf while
maas-rack-controller is installed, or the snap's
/var/snap/maas/current/rackd.conf where the snap runs a rack) a group of
keys that neither the file nor --set gives a value takes the rack's:
  region.url, other_urls   the internal API on each host of rackd.conf's
                           maas_url (https, port 5242), as MAAS's own rack
                           agent reaches the region; url = "" is unset
  region.cert_file,        the rack's certificate, key and MAAS's CA
  key_file, ca_file        (3.8+ agent.*, else 3.6/3.7 cluster.*)
  [dhcpd]'s five keys      MAAS's dhcpd files (dhcpd -6's when it has one)
A group with one key set keeps the file's values and the defaults for
the rest. The log and --print-config say what the rack gave.

The agent follows the files its configuration is built from besides
--config: rackd.conf, the rack's certificates (and whether MAAS's dhcpd
-6 files exist), and the files the keys SIGHUP puts in force name (the
region's CA, certificate, key and token, release.token_file,
maas.api_key_file, maas.ca_file). It looks at them every 5 s; a change
that held for a look (a rack registered with another region, a renewed
certificate) is applied as SIGHUP would apply it, with --config as in
force: an edit of that file waits for a SIGHUP. A change that makes no
valid configuration is logged, and the running one stays. On a rack
that has no certificates yet (not registered) the agent runs and
queues, and delivers once MAAS writes them.

Signals:
  SIGTERM, SIGINT  stop: take no new work, flush what can be flushed within
                   a bound, persist, exit 0. A second signal kills at once.
  SIGHUP           reload: re-read --config (with the same --set). A file
                   with errors is logged and ignored; the running
                   configuration stays. These keys take effect at once
                   (a delivery waiting out a configuration error is
                   retried with the new settings):
` + reloadableList() + `
                   The log names every other changed key, which takes
                   effect at the next restart, and leasekeeper status
                   shows them (restart_pending, exit 3) until then.

Under systemd (Type=notify) the agent sends READY=1 once every part runs,
STATUS= with the queue depth, watchdog pings while every part makes
progress (WatchdogSec=), RELOADING=1 on SIGHUP or a followed change and
STOPPING=1 on the way out.

Exit status: 0 after a clean stop, 79 (not with --print-config, which
says 78) when the only thing missing is the region: region.url is not
set and no MAAS rack here gives it (an agent installed and not
configured yet; the packaged unit counts 79 as a clean exit, so such an
agent is left inactive, not failed), 78 when the configuration (the file,
or a --set) is missing, unreadable or invalid, hook.socket is not the
socket systemd passed, or control.group or hook.socket_group names a
group the agent's user is not in, or no group (the packaged unit does not restart
then: fix it,
then systemctl restart leasekeeper), 1 when a part failed or a file the
configuration names (the region's certificates, key or token, a secret
file) cannot be used (restarted; a MAAS rack's own certificates not
there yet, a rack not registered, are waited for instead), 2 for bad
flags; the reason is on stderr and in the log.`,
		Example: `  leasekeeper agent --config /etc/leasekeeper/leasekeeper.toml
  leasekeeper agent --print-config            # validate, show every value, exit
  leasekeeper agent --print-reference         # every key, its default and what it does
  leasekeeper agent --set region.url=http://127.0.0.1:8080/leases \
                    --set metrics.listen=127.0.0.1:0 --log-level debug`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if printRef {
				if printConfig {
					return usageError{errors.New("--print-reference and --print-config: one at a time")}
				}
				_, err := env.Stdout.Write(packaging.Reference)
				return err
			}
			overrides := sets
			if logLevel != "" {
				overrides = append(overrides, "log.level="+logLevel)
			}
			// A --set that names no key or cannot hold its value is the
			// configuration's problem (exit 78, not restarted: a
			// drop-in's ExecStart= would read the same), as the help
			// says; it was exit 2, restarted every RestartSec (a cold
			// review).
			// Every bad --set is told at once, as the file's problems are.
			var bad []error
			for _, o := range overrides {
				if err := config.Default().Override(o); err != nil {
					bad = append(bad, fmt.Errorf("--set %s", err))
				}
			}
			if len(bad) > 0 {
				return configError{errors.Join(bad...)}
			}
			src := &configSource{env: env, path: configPath, overrides: overrides}
			cfg, err := src.load()
			var secret *config.SecretFileError
			switch {
			case errors.As(err, &secret):
				return err // may be mended without the configuration: restarted
			case unconfigured(err) && !printConfig:
				ue := unconfiguredError{err}
				notReady(ue.Error())
				return ue
			case err != nil:
				return configError{err}
			}
			if printConfig {
				// What start reads besides the file: the region's
				// certificates, key and token, and the sockets' groups.
				// Every problem is told at once.
				if err := errors.Join(agent.CheckRegion(cfg), agent.CheckGroups(cfg)); err != nil {
					return fmt.Errorf("config %s: %w", configPath, err)
				}
				if cfg.Rack != nil {
					fmt.Fprintf(env.Stdout, "# %s\n# keys: %s\n\n", cfg.Rack.Describe(cfg.RackKeys), strings.Join(cfg.RackKeys, ", "))
				}
				return cfg.WriteTOML(env.Stdout)
			}
			// SIGTERM and SIGINT cancel cmd.Context() (Main), and the
			// agent then flushes before it returns; SIGHUP reloads.
			ownsStop(cmd.Context())
			hup := make(chan os.Signal, 4)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			// After the first stop signal the default action is back: the
			// second one kills the process without waiting for the flush.
			release := func() { signal.Reset(syscall.SIGTERM, syscall.SIGINT) }
			return runAgent(cmd.Context(), env, cfg, src, hup, release)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&configPath, "config", "c", config.DefaultPath, "configuration file")
	f.StringArrayVar(&sets, "set", nil, "override one key: section.key=value (repeatable)")
	f.StringVar(&logLevel, "log-level", "", "same as --set log.level=LEVEL (trace, debug, info, warn, error)")
	f.BoolVar(&printConfig, "print-config", false, "validate the configuration and the region's certificate, key and token files as start does, print it with defaults filled in, and exit")
	f.BoolVar(&printRef, "print-reference", false, "print the reference configuration (every key with its default and what it does; no file is read) and exit")
	return cmd
}

// configSource is where the running agent's configuration comes from:
// its file, read at start (load) and again at each SIGHUP (read), and the
// host around it — a MAAS rack's files, the files its keys name — which
// the agent follows (again).
type configSource struct {
	env       *Env
	path      string
	overrides []string
	// file is the file as in force: read at start, or at the last SIGHUP
	// whose configuration the agent took.
	file []byte
	// looked is the files the configuration at start was built from, as
	// they were right after it was read (config.Watcher's Start).
	looked config.Files
}

// load reads and validates the file, with the overrides applied, as the
// file in force: at start.
func (s *configSource) load() (*config.Config, error) {
	cfg, b, err := s.read()
	if err != nil {
		return nil, err
	}
	s.file, s.looked = b, config.Look(nil, config.Sources(cfg), time.Now())
	return cfg, nil
}

// read reads and validates the file through env.Open, with the
// overrides applied; the caller keeps b as file once the configuration
// is in force.
func (s *configSource) read() (cfg *config.Config, b []byte, err error) {
	f, err := s.env.Open(s.path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	if b, err = io.ReadAll(io.LimitReader(f, config.MaxFileSize+1)); err != nil { // more is refused by parse
		return nil, nil, fmt.Errorf("config: %s: %w", s.path, err)
	}
	cfg, err = s.parse(b)
	return cfg, b, err
}

// again is the configuration the file in force makes on the host as it
// is now: the rack looked for and rackd.conf read again, the files the
// keys name checked again. An edit of the file that no SIGHUP put in
// force stays out.
func (s *configSource) again() (*config.Config, error) { return s.parse(s.file) }

func (s *configSource) parse(b []byte) (*config.Config, error) {
	cfg, err := config.ParseOn(s.env.rack(), bytes.NewReader(b), s.path, s.overrides...)
	if err != nil {
		return nil, fmt.Errorf("config %w", err)
	}
	return cfg, nil
}

// unconfigured reports whether err, configSource.load's, says only that no
// region was ever set (neither region.url nor other_urls) and no MAAS
// rack gives one: an agent installed and not configured yet, not a
// configuration in error.
func unconfigured(err error) bool {
	var ps config.Problems
	return errors.As(err, &ps) && len(ps) == 1 && errors.Is(ps[0].Err, config.ErrNoRegion)
}

// notReady tells systemd that the agent is up, and why it stops at once:
// a Type=notify service whose main process exits before READY=1 fails
// ("protocol": systemd's src/core/service.c, service_sigchld_event),
// whatever SuccessExitStatus= says, and is restarted. The
// barrier waits until systemd has read the message, so that it is not
// taken for an exited process's.
func notReady(why string) {
	n := systemd.NewNotifier()
	if sent, err := n.Notify("READY=1\nSTATUS=not configured: " + strings.NewReplacer("\n", " ").Replace(why)); sent && err == nil {
		_ = n.Barrier(time.Second)
	}
}

// logRack tells which keys a MAAS rack gave their values, and from where.
func logRack(log zerolog.Logger, cfg *config.Config) {
	if cfg.Rack != nil {
		log.Info().Str("maas_rack", cfg.Rack.Kind).Str("rackd_conf", cfg.Rack.RackdConf).Strs("keys", cfg.RackKeys).
			Msg(cfg.Rack.Describe(cfg.RackKeys))
	}
}

// runAgent runs the agent until ctx ends (Main cancels it on SIGTERM or
// SIGINT, with a stopSignal cause) or a part fails. Each SIGHUP on hup
// loads src's file again and applies it; a change of a file the running
// configuration was built from besides its own (config.Sources) applies
// src's file as last loaded on the host as it is now (follow). release
// is called once stopping has begun (for whatever reason), to let a
// second signal kill the process.
func runAgent(ctx context.Context, env *Env, cfg *config.Config, src *configSource,
	hup <-chan os.Signal, release func()) error {
	level := &levelSampler{}
	level.set(cfg.Log.Level)
	root := newLogger(env.Stderr, cfg.Log, level, env.Now)
	log := root.With().Str("component", "main").Logger()
	logRack(log, cfg)

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	a, err := agent.New(cfg, root, reg, env.Now)
	if err != nil {
		return err
	}
	a.Version = env.Version
	closeParts, err := a.Assemble()
	if err != nil {
		return err
	}
	defer func() {
		if cerr := closeParts(); cerr != nil {
			log.Error().Err(cerr).Msg("closing the outbox")
		}
	}()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed := make(chan []string)
	watcher := config.Watcher{Interval: env.FollowEvery, Sources: func() []config.Source { return config.Sources(a.Config()) }, Start: src.looked}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if err := watcher.Run(ctx, changed); ctx.Err() == nil {
			log.Error().Err(err).Msg("not following the files the configuration is built from (a change of rackd.conf or a certificate takes a SIGHUP)")
		}
	}()
	handled := make(chan struct{})
	go func() {
		defer close(handled)
		for {
			select {
			case <-ctx.Done():
				if s, ok := context.Cause(ctx).(stopSignal); ok {
					log.Info().Str("signal", s.String()).Msg("stopping (a second signal kills)")
				}
				release()
				return
			case <-hup:
				log.Info().Msg("SIGHUP: reloading the configuration")
				cfg, b, err := src.read()
				if err != nil {
					log.Error().Err(err).Msg("reload refused; the running configuration stays in force")
					continue
				}
				if apply(a, cfg, level, log) {
					src.file = b
				}
			case files := <-changed:
				follow(a, src, files, level, log)
			}
		}
	}()
	err = a.Run(ctx)
	cancel()
	<-handled
	<-watched
	return err
}

// follow applies what changed in files the running configuration was
// built from besides its own (config.Sources): the file in force, on the
// host as it is now. When no key's value changed and none of the files
// is one a key names (rackd.conf rewritten, say, with another setting
// than maas_url), the running configuration stays as it is. A change
// that makes no valid configuration is logged; the next change, or a
// SIGHUP, tries again.
func follow(a *agent.Agent, src *configSource, files []string, level *levelSampler, log zerolog.Logger) {
	log.Info().Strs("files", files).Msg("files the configuration is built from changed: applying them (with the configuration file in force; SIGHUP reads it again)")
	cfg, err := src.again()
	if err != nil {
		log.Error().Err(err).Strs("files", files).Msg("the changed files make no valid configuration; the running configuration stays in force")
		return
	}
	named := config.Credentials(cfg)
	if len(config.Diff(a.Config(), cfg)) == 0 && !slices.ContainsFunc(files, func(f string) bool { return slices.Contains(named, f) }) {
		log.Info().Strs("files", files).Msg("nothing the agent uses changed")
		return
	}
	apply(a, cfg, level, log)
}

// apply puts cfg, a valid configuration, in force (SIGHUP, follow), or
// keeps the running one when a part cannot take it (false).
func apply(a *agent.Agent, cfg *config.Config, level *levelSampler, log zerolog.Logger) bool {
	changed := config.Diff(a.Config(), cfg)
	logRack(log, cfg)
	if err := a.Reload(cfg); err != nil {
		log.Error().Err(err).Strs("changed", changed).Msg("reload refused: a part cannot take the new configuration; the running configuration stays in force, every key of it")
		return false
	}
	level.set(cfg.Log.Level)
	var later []string
	for _, k := range changed {
		if !agent.Reloadable(k) {
			later = append(later, k)
		}
	}
	log.Info().Strs("changed", changed).Msg("configuration reloaded")
	if len(later) > 0 {
		log.Warn().Strs("keys", later).Msg("these changes take effect at the next restart")
	}
	return true
}

// levelSampler is the log level that SIGHUP can change: a zerolog Sampler
// drops events below it before they are built, so it costs what a logger
// level costs, and every child logger shares it (no global level).
type levelSampler struct{ l atomic.Int32 }

func (s *levelSampler) set(name string) {
	l, err := zerolog.ParseLevel(name)
	if err != nil || name == "" {
		l = zerolog.InfoLevel // Validate accepted name; be safe anyway
	}
	s.l.Store(int32(l))
}

func (s *levelSampler) Sample(l zerolog.Level) bool { return l >= zerolog.Level(s.l.Load()) }

// newLogger builds the root logger: JSON or console per cfg, level through
// s, "time" from now with milliseconds (set per logger: zerolog's own
// format is a global). Components add their own "component" field.
func newLogger(w io.Writer, cfg config.Log, s *levelSampler, now func() time.Time) zerolog.Logger {
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = isatty.IsTerminal(f.Fd())
	}
	if cfg.Resolve(os.Getenv("JOURNAL_STREAM") != "", tty) == "console" {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000", NoColor: !tty}
	}
	stamp := zerolog.HookFunc(func(e *zerolog.Event, _ zerolog.Level, _ string) {
		e.Str(zerolog.TimestampFieldName, now().UTC().Format(logTime))
	})
	return zerolog.New(w).Level(zerolog.TraceLevel).Sample(s).Hook(stamp)
}

// logTime is RFC 3339 with milliseconds.
const logTime = "2006-01-02T15:04:05.000Z07:00"

// noArgs is cobra.NoArgs with a usage error that says so, and names
// --config when the argument looks like the file it wants: cobra's own
// said `unknown command "/etc/leasekeeper/leasekeeper.toml"` (a cold
// review).
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("%s takes no arguments, and was given %q", cmd.CommandPath(), args[0])
	if f := cmd.Flags().Lookup("config"); f != nil && (strings.ContainsRune(args[0], '/') || strings.Contains(args[0], ".")) {
		msg += fmt.Sprintf("; to name the file, use --config %s (%s)", args[0], f.Usage)
	}
	return usageError{errors.New(msg)}
}

// agentURL resolves where the running agent's HTTP listener is: --url if
// given (a URL or host:port), else metrics.listen from the config file
// (its defaults when the default file does not exist).
func agentURL(env *Env, flagURL, configPath string) (string, error) {
	if flagURL != "" {
		if !strings.Contains(flagURL, "://") {
			flagURL = "http://" + flagURL
		}
		return strings.TrimRight(flagURL, "/"), nil
	}
	cfg, err := decodeAgentConfig(env, configPath)
	if err != nil {
		return "", err
	}
	return listenURL(cfg, configPath)
}

// listenURL is agentURL for a configuration read already.
func listenURL(cfg *config.Config, configPath string) (string, error) {
	listen := cfg.Metrics.Listen
	if listen == "" {
		return "", fmt.Errorf("metrics.listen is empty in %s, so the agent serves no status; set it (e.g. \"127.0.0.1:9742\") or pass --url", configPath)
	}
	if _, port, err := net.SplitHostPort(listen); err == nil && port == "0" {
		return "", fmt.Errorf("metrics.listen in %s is %s: the agent listens on a port of the kernel's choosing (its log names it: \"serving /metrics, /healthz, /status\"); pass it as --url", configPath, listen)
	}
	return "http://" + dialable(listen), nil
}

// decodeAgentConfig reads the config file without requiring it to be
// complete (the operator commands need metrics.listen and state.dir only).
// A missing file at the default path means the defaults (an agent run
// without one); at any other path it is an error: a mistyped --config
// would otherwise ask the default agent and answer for it.
func decodeAgentConfig(env *Env, path string) (*config.Config, error) {
	return decodeAgentConfigAs(env, path, false)
}

// decodeAgentConfigAs is decodeAgentConfig; strict refuses a file with
// problems, for a command that acts on what the file names (release
// --for: a bad dhcpd.leases would leave it the default's file).
func decodeAgentConfigAs(env *Env, path string, strict bool) (*config.Config, error) {
	f, err := env.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		if path == config.DefaultPath {
			return config.DefaultOn(env.rack()), nil
		}
		return nil, fmt.Errorf("config: %w (--config names no file; the agent's is %s unless its unit says otherwise)", err, config.DefaultPath)
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	// A file with problems is the agent's to refuse (at start, or at a
	// reload, which keeps it running on the file it read before): an
	// operator command still reaches that agent, on the keys that are
	// right, and says so. It used to stop at the problems (a cold
	// review), just when the operator needs status.
	cfg, problems, err := config.DecodePartialOn(env.rack(), f, path)
	if err == nil && strict && problems != nil {
		err = problems
	}
	if err != nil && !strict {
		// Not TOML at all (a section written twice, a quote left open):
		// the agent runs on, on the file it read before; where it
		// listens is the defaults' guess, said so. Stopping here told a
		// health check that a running agent was down (a cold review).
		fmt.Fprintf(env.Stderr, "leasekeeper: warning: config %v\nleasekeeper: warning: the agent refuses this file at its next start or reload; asking it where the defaults say it listens (--url or --socket to say where)\n", err)
		return config.DefaultOn(env.rack()), nil
	}
	if err != nil {
		return nil, fmt.Errorf("config %w", err)
	}
	// Where to reach the agent: a value it refuses is not where it
	// listens (it runs on the file it read before, or on the defaults).
	// It dialled metrics.listen = "127.0.0.1" on port 80 (a cold review).
	var bad config.Problems
	if errors.As(cfg.Validate(), &bad) {
		def := config.Default()
		for _, p := range bad {
			var v string
			switch p.Key {
			case "metrics.listen":
				cfg.Metrics.Listen, v = def.Metrics.Listen, def.Metrics.Listen
			case "control.socket":
				cfg.Control.Socket, v = def.Control.Socket, def.Control.Socket
			default:
				continue
			}
			fmt.Fprintf(env.Stderr, "leasekeeper: warning: config %s: %v; going by the default, %q\n", path, p, v)
		}
	}
	if problems != nil {
		fmt.Fprintf(env.Stderr, "leasekeeper: warning: config %v\nleasekeeper: warning: the agent refuses this file at its next start or reload; asking it with what is right in the file and the defaults for the rest (--url or --socket to say where)\n", problems)
	}
	return cfg, nil
}

// dialable turns a listen address into one a client can connect to: an
// unspecified host (":9742", "0.0.0.0:9742", "[::]:9742") becomes
// loopback.
func dialable(listen string) string {
	switch {
	case strings.HasPrefix(listen, ":"):
		return "127.0.0.1" + listen
	case strings.HasPrefix(listen, "0.0.0.0:"):
		return "127.0.0.1" + strings.TrimPrefix(listen, "0.0.0.0")
	case strings.HasPrefix(listen, "[::]:"):
		return "[::1]" + strings.TrimPrefix(listen, "[::]")
	}
	return listen
}

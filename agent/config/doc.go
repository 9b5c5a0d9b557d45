// Package config is the agent's configuration: the TOML file
// (/etc/leasekeeper/leasekeeper.toml), its defaults, its validation and
// "section.key=value" overrides from the command line.
//
// It is strict on purpose. A key the agent does not know is an error that
// names it (a typo such as "tiemout" must not silently leave a default in
// force), and so is every bad value: each problem is a *KeyError whose
// message starts with the key, e.g.
//
//	region.timeout: "5x" is not a duration (Go syntax: "10s", "1m30s")
//
// and Parse reports every problem at once rather than the first: the
// file's unknown keys and values of the wrong type, and the bad values of
// every section but one where a wrong type left a default in its place.
//
// Durations are Go duration strings and paths are absolute.
// packaging/leasekeeper.toml documents every key (a test parses it and
// checks that no key of Config is missing from it); the package's short
// conffile, packaging/etc/leasekeeper/leasekeeper.toml, holds only what a
// rack sets (a test parses it).
//
// The package only reads what it is given: it never opens sockets, never
// resolves users or groups and never touches the state directory. The
// files it opens besides the config are the secrets, on Parse:
// release.token_file, maas.api_key_file and pair.key_file, and a MAAS
// rack's (FindMAASRack, under the root it is given: rackd.conf, the
// snap's mode, whether its certificates and dhcpd files exist). A secret
// file group or others can access must stop the agent at start (or a
// reload) with an error naming the key, not surface at the first request.
// HookUIDs resolves the default allowed_uids through an injected lookup.
//
// Sources names what a configuration was built from besides its own file
// (the rack's files, the files its reloadable keys name), and Watcher
// follows them by path, every few seconds: a stat each, and a read of
// those followed by content (rackd.conf, the snap's mode, the
// certificates, key and tokens in use) whose stat changed. The running
// agent applies a change without a SIGHUP (internal/cli).
package config

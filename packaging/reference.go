// Package packaging holds what the Debian package installs besides the
// binaries. Its one Go export is the reference configuration, embedded in
// leasekeeper so that `leasekeeper agent --print-reference` shows every
// key where /usr/share/doc is left out (minimal images).
package packaging

import _ "embed"

// Reference is leasekeeper.toml: every key of the agent's configuration
// with its default and what it does (the package installs it as
// /usr/share/doc/leasekeeper/examples/leasekeeper.toml).
//
//go:embed leasekeeper.toml
var Reference []byte

// Package sockgroup gives a socket the agent binds to the group its
// configuration names (control.group, hook.socket_group).
//
// Without CAP_CHOWN a process may give a file it owns only to a group it
// is a member of (chown(2)). The packaged agent runs as the user
// leasekeeper with no such capability, so a group that user is not in
// fails at every start, the same way each time: Lookup says so before
// anything is bound, as a *NotMemberError, which the agent's command
// exits with as a configuration error (the unit does not restart on it).
package sockgroup

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"syscall"
)

// NotMemberError: the agent may not give its socket to the group its
// configuration names, being neither root nor a member of it.
type NotMemberError struct {
	Key   string // the configuration key, e.g. "control.group"
	Group string
	GID   int
	UID   int // the agent's effective uid
}

func (e *NotMemberError) Error() string {
	who := "uid " + strconv.Itoa(e.UID)
	if u, err := user.LookupId(strconv.Itoa(e.UID)); err == nil {
		who += " (" + u.Username + ")"
	}
	return fmt.Sprintf("%s %q: the agent runs as %s, which is not a member of group %s (gid %d), so it cannot give its socket to that group; "+
		"add the group to the agent (systemctl edit leasekeeper: [Service] SupplementaryGroups=%s), or set %s = \"\"",
		e.Key, e.Group, who, e.Group, e.GID, e.Group, e.Key)
}

// UnknownGroupError: the group the configuration names does not exist
// on this machine (a typo, or a group not yet made). Like
// NotMemberError, it fails every start the same way.
type UnknownGroupError struct {
	Key   string // the configuration key, e.g. "control.group"
	Group string
}

func (e *UnknownGroupError) Error() string {
	return fmt.Sprintf("%s %q: no such group on this machine (getent group %s finds none): correct the name, make the group (groupadd %s, then add the agent's user to it), or set %s = \"\"",
		e.Key, e.Group, e.Group, e.Group, e.Key)
}

// Lookup resolves the group name under key and checks that this process
// may give a file to it: root may, and so may a member (its effective or
// a supplementary group). An unknown group is an *UnknownGroupError;
// another failure to look it up (a directory service down) is returned
// as it came.
func Lookup(key, name string) (gid int, err error) {
	g, err := user.LookupGroup(name)
	var unknown user.UnknownGroupError
	if errors.As(err, &unknown) {
		return 0, &UnknownGroupError{Key: key, Group: name}
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", key, err)
	}
	if gid, err = strconv.Atoi(g.Gid); err != nil {
		return 0, fmt.Errorf("%s %s: gid %q", key, name, g.Gid)
	}
	groups, err := os.Getgroups()
	if err != nil {
		return 0, fmt.Errorf("%s: the agent's groups: %w", key, err)
	}
	if !mayGive(gid, os.Geteuid(), os.Getegid(), groups) {
		return 0, &NotMemberError{Key: key, Group: name, GID: gid, UID: os.Geteuid()}
	}
	return gid, nil
}

// mayGive reports whether a process of effective uid euid, effective
// gid egid and supplementary groups groups may give a file it owns to
// gid (chown(2), without CAP_CHOWN unless root).
func mayGive(gid, euid, egid int, groups []int) bool {
	return euid == 0 || egid == gid || slices.Contains(groups, gid)
}

// Give gives the file at path (the process's own socket) to gid, as
// Lookup resolved it from key's name. A refusal despite Lookup's check
// is a system call filter's (the packaged unit's SystemCallFilter= must
// allow @chown), or root's without CAP_CHOWN, and the error says so.
func Give(path string, gid int, key, name string) error {
	err := os.Lchown(path, -1, gid)
	if errors.Is(err, syscall.EPERM) {
		return fmt.Errorf("%s %s: %w (refused although the agent may give its files to that group: a SystemCallFilter= that denies the @chown set, or root without CAP_CHOWN)", key, name, err)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", key, name, err)
	}
	return nil
}

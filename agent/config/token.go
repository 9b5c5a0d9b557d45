package config

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/leasekeeper/leasekeeper/internal/maasapi"
	"github.com/leasekeeper/leasekeeper/internal/safefile"
)

// errLines: a token file of several lines (one token is wanted).
var errLines = errors.New("one token is wanted, on one line")

// maxToken bounds what ReadToken reads of a token file.
const maxToken = 64 << 10

// ReadToken reads a bearer token file (release.token_file,
// region.token_file): one line, the token, surrounding white space
// ignored. The file must be a regular file (opened without blocking) that
// others cannot access at all and its group can at most read: mode 0600,
// or 0640 with the agent's group, as the Debian package runs the agent as
// the user leasekeeper (install -m 0640 -o root -g leasekeeper). An
// empty file and a token with white space or control characters inside
// are refused too.
func ReadToken(path string) (string, error) {
	f, err := safefile.Open(path, safefile.FollowLinks)
	if errors.Is(err, fs.ErrPermission) {
		return "", fmt.Errorf("%w: the agent runs as uid %d; give the file to its group, mode 0640 (install -m 0640 -o root -g leasekeeper …)", err, os.Geteuid())
	}
	if errors.Is(err, safefile.ErrNotRegular) {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if perm := fi.Mode().Perm(); perm&0o037 != 0 {
		return "", fmt.Errorf("%s has mode %04o: others can access it, or its group can write it; chmod 600 it, or 640 with the agent's group", path, perm)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxToken+1))
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > maxToken {
		return "", fmt.Errorf("%s is longer than %d bytes: not a token", path, maxToken)
	}
	tok := strings.TrimSpace(string(b))
	switch {
	case tok == "":
		return "", fmt.Errorf("%s is empty", path)
	case strings.Contains(tok, "\n"):
		return "", fmt.Errorf("%s holds %d lines: %w", path, strings.Count(tok, "\n")+1, errLines)
	case strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return "", fmt.Errorf("%s: the token contains white space or control characters", path)
	}
	return tok, nil
}

// ReadMAASKey reads maas.api_key_file: a MAAS API key
// (consumer_key:token_key:token_secret, as `maas apikey` prints it) on one
// line, by ReadToken's rules (not readable by others, group read at most).
func ReadMAASKey(path string) (maasapi.Key, error) {
	tok, err := ReadToken(path)
	if errors.Is(err, errLines) {
		return maasapi.Key{}, fmt.Errorf("%w (`maas apikey --username NAME` prints every key the user has, one per line: keep one, or make one for this rack with `maas apikey --username NAME --generate`)", err)
	}
	if err != nil {
		return maasapi.Key{}, err
	}
	k, err := maasapi.ParseKey(tok)
	if err != nil {
		return maasapi.Key{}, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// MinReleaseToken is the shortest release.token_file token accepted:
// the token frees any lease, and a guess costs a request (head -c 32
// /dev/urandom | base64 makes 44 characters).
const MinReleaseToken = 32

// ReadReleaseToken reads release.token_file: a token file (ReadToken's
// rules) of at least MinReleaseToken characters.
func ReadReleaseToken(path string) (string, error) {
	tok, err := ReadToken(path)
	if err != nil {
		return "", err
	}
	if len(tok) < MinReleaseToken {
		return "", fmt.Errorf("%s: a token of %d characters, at least %d: it frees any lease, so it must not be guessable ((umask 077; head -c 32 /dev/urandom | base64 > %s))", path, len(tok), MinReleaseToken, path)
	}
	return tok, nil
}

// MinPairKey is the shortest pair.key_file secret accepted: 32
// characters (head -c 32 /dev/urandom | base64 makes 44).
const MinPairKey = 32

// ReadPairKey reads pair.key_file: a token file (ReadToken's rules) of at
// least MinPairKey characters, the same on both agents of the pair. Its
// bytes are the key the channel's datagrams are signed with.
func ReadPairKey(path string) ([]byte, error) {
	tok, err := ReadToken(path)
	if err != nil {
		return nil, err
	}
	if len(tok) < MinPairKey {
		return nil, fmt.Errorf("%s: a key of %d characters, at least %d (head -c 32 /dev/urandom | base64 > %s)", path, len(tok), MinPairKey, path)
	}
	return []byte(tok), nil
}

package config

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// maxToken bounds what ReadToken reads of a token file.
const maxToken = 64 << 10

// ReadToken reads a bearer token file (release.token_file): one line, the
// token, surrounding white space ignored. It refuses a file that is not
// a regular file, that group or others can read or write (the token
// authorises freeing any lease), an empty one and a token with white
// space or control characters inside.
func ReadToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("%s has mode %04o: group or others can access it; chmod 600 it", path, perm)
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
	case strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return "", fmt.Errorf("%s: the token contains white space or control characters", path)
	}
	return tok, nil
}

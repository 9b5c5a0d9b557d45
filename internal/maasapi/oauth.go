package maasapi

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Key is a MAAS API key: what `maas apikey --username NAME` prints and
// `maas login` takes, "consumer_key:token_key:token_secret".
type Key struct {
	Consumer, Token, Secret string
}

// ParseKey reads a key in MAAS's form.
func ParseKey(s string) (Key, error) {
	parts := strings.Split(strings.TrimSpace(s), ":")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return Key{}, errors.New("a MAAS API key is consumer_key:token_key:token_secret (three non-empty parts), as `maas apikey` prints it")
	}
	return Key{Consumer: parts[0], Token: parts[1], Secret: parts[2]}, nil
}

// String hides the secret.
func (k Key) String() string { return k.Consumer + ":" + k.Token + ":…" }

// Authorization is the OAuth 1.0a PLAINTEXT Authorization header value
// for a request at time now with the given nonce: the consumer secret is
// empty, so the signature is "&" and the percent-encoded token secret,
// itself percent-encoded as a header parameter (RFC 5849 3.4.4, 3.5.1).
func (k Key) Authorization(now time.Time, nonce string) string {
	sig := "&" + encode(k.Secret)
	params := [][2]string{
		{"oauth_consumer_key", k.Consumer},
		{"oauth_token", k.Token},
		{"oauth_signature_method", "PLAINTEXT"},
		{"oauth_signature", sig},
		{"oauth_timestamp", strconv.FormatInt(now.Unix(), 10)},
		{"oauth_nonce", nonce},
		{"oauth_version", "1.0"},
	}
	var b strings.Builder
	b.WriteString(`OAuth realm=""`)
	for _, p := range params {
		fmt.Fprintf(&b, `, %s="%s"`, p[0], encode(p[1]))
	}
	return b.String()
}

// Sign returns a fresh Authorization header value.
func (k Key) Sign() string {
	var n [16]byte
	_, _ = rand.Read(n[:]) // never fails (crypto/rand)
	return k.Authorization(time.Now(), hex.EncodeToString(n[:]))
}

// encode is RFC 5849 3.6 percent-encoding: everything but unreserved
// characters (ALPHA, DIGIT, "-", ".", "_", "~"), upper-case hex.
func encode(s string) string {
	// url.PathEscape leaves sub-delims and ":" "@" alone; QueryEscape
	// turns " " into "+". Neither is RFC 5849's, so do it by hand.
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// ParseAuthorization reads an "OAuth k="v", …" header as MAAS does
// (src/maasserver/api/auth.py, parse_auth_params), with the values
// percent-decoded as piston's OAuth request does. ok is false when the
// header does not start with "OAuth".
func ParseAuthorization(h string) (params map[string]string, ok bool) {
	h = strings.TrimSpace(h)
	rest, ok := strings.CutPrefix(h, "OAuth")
	if !ok {
		return nil, false
	}
	params = map[string]string{}
	for _, p := range strings.Split(rest, ",") {
		k, v, found := strings.Cut(strings.TrimSpace(p), "=")
		if !found {
			continue
		}
		v = strings.Trim(strings.TrimSpace(v), `"`)
		if d, err := url.PathUnescape(v); err == nil {
			v = d
		}
		params[strings.TrimSpace(k)] = v
	}
	return params, true
}

package maasapi

import (
	"strings"
	"testing"
	"time"
)

// The header maascli sends (src/apiclient/maas_client.py, MAASOAuth:
// oauthlib's Client with SIGNATURE_PLAINTEXT and no consumer secret):
// signature "&" + token secret, percent-encoded in the header.
func TestAuthorizationPLAINTEXT(t *testing.T) {
	k, err := ParseKey(" ck:tk:s3cr%t \n")
	if err != nil {
		t.Fatal(err)
	}
	h := k.Authorization(time.Unix(1700000000, 0), "n0nce")
	for _, want := range []string{`OAuth realm=""`, `oauth_consumer_key="ck"`, `oauth_token="tk"`,
		`oauth_signature_method="PLAINTEXT"`, `oauth_signature="%26s3cr%2525t"`, `oauth_timestamp="1700000000"`,
		`oauth_nonce="n0nce"`, `oauth_version="1.0"`} {
		if !strings.Contains(h, want) {
			t.Errorf("%s lacks %s", h, want)
		}
	}
	// What MAAS reads back (src/maasserver/api/auth.py, parse_auth_params,
	// then piston's unquoting): the signature is "&" + escape(secret).
	p, ok := ParseAuthorization(h)
	if !ok || p["oauth_signature"] != "&s3cr%25t" || p["oauth_consumer_key"] != "ck" {
		t.Errorf("parsed %v %v", p, ok)
	}
	if _, ok := ParseAuthorization("Bearer x"); ok {
		t.Error("a bearer header parsed as OAuth")
	}
	if k.String() != "ck:tk:…" {
		t.Errorf("String shows %q", k)
	}
}

func TestParseKey(t *testing.T) {
	for _, s := range []string{"", "a:b", "a:b:c:d", "a::c", ":b:c"} {
		if _, err := ParseKey(s); err == nil {
			t.Errorf("ParseKey(%q) accepted", s)
		}
	}
}

func TestBaseURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://r:5240/MAAS/":         "http://r:5240/MAAS/api/2.0/",
		"http://r:5240/MAAS":          "http://r:5240/MAAS/api/2.0/",
		"http://r:5240/MAAS/api/2.0/": "http://r:5240/MAAS/api/2.0/",
		"https://r:5443/MAAS/api/2.0": "https://r:5443/MAAS/api/2.0/",
	} {
		if got, err := BaseURL(in); err != nil || got != want {
			t.Errorf("BaseURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"ftp://r/MAAS/", "r:5240/MAAS", "http://r/MAAS/?x=1"} {
		if _, err := BaseURL(bad); err == nil {
			t.Errorf("BaseURL(%q) accepted", bad)
		}
	}
}

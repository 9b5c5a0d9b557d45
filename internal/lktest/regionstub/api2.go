package regionstub

// The public API 2.0 stand-in: the part of MAAS's Django API (port 5240,
// behind nginx) that frees an observed address. Each rule names the MAAS
// file it mirrors (canonical/maas, 3.6–3.8 and master):
//
//   - OAuth 1.0a in the Authorization header, PLAINTEXT signature "&" +
//     token secret (consumer secrets are empty); a request without it is
//     anonymous and answered 401, an unknown key 401 "Authorization
//     Error: Invalid API key.": src/maasserver/api/auth.py
//     (MAASAPIAuthentication, parse_auth_params, OAuthUnauthorized),
//     src/apiclient/maas_client.py (MAASOAuth: SIGNATURE_PLAINTEXT);
//   - GET users/?op=whoami returns the key's user:
//     src/maasserver/api/users.py (whoami);
//   - who may do what: MAAS 3.8 and later ask OpenFGA whether the user
//     can_view_ipaddresses (to list all) and can_edit_global_entities
//     (to force a release), which an administrator has through the
//     Administrators group, not through is_superuser (the two can
//     differ); 3.6 and 3.7 asked is_superuser. The stub answers as 3.8
//     and later: src/maasserver/authorization.py,
//     src/maasserver/api/ip_addresses.py;
//   - GET ipaddresses/?ip=IP[&all=true]: records with a non-null IP;
//     all=true by a user without the permission is 403 "Listing all IP
//     addresses requires admin privileges."; without all, only the
//     user's own USER_RESERVED ones; fields alloc_type, alloc_type_name
//     ("Observed" for DISCOVERED), created, ip, owner, interface_set
//     (with mac_address), subnet; a malformed ip is 400 "Parameter 'ip'
//     must contain an IP address.": src/maasserver/api/ip_addresses.py
//     (read), src/maasserver/enum.py (IPADDRESS_TYPE_CHOICES),
//     src/maascommon/enums/ipaddress.py (DISCOVERED = 6);
//   - an observed record is linked to every interface the region has
//     with the lease's MAC (one unknown interface by default; a
//     machine's NIC and its VLANs or bond with SetInterfaces):
//     src/maasservicelayer/services/leases.py (store_lease_info),
//     src/maasservicelayer/services/interfaces.py (link_ip);
//   - POST ipaddresses/ op=release: ip mandatory; force=true by a user
//     without the permission is 403 "Force-releasing an IP address
//     requires admin privileges."; force with discovered=true takes only
//     the DISCOVERED record, force alone every other type, neither the
//     user's own reservation; none found is 400 "IP address %s does not
//     exist." (with force) or the longer message without; found is
//     unlinked from each of its interfaces in turn, and unlinking a
//     DISCOVERED record deletes it, so a record with two or more
//     interfaces is deleted twice: Django raises, the middleware answers
//     500 with the exception's text, and the transaction is rolled back
//     (the record stays); otherwise 204:
//     src/maasserver/api/ip_addresses.py (release),
//     src/maasserver/models/interface.py (unlink_ip_address),
//     src/maasserver/middleware.py (process_exception).
//
// The DISCOVERED records are the stub's view: what the leases API
// applied, with its dynamic-range gate (maas.go), so a release removes
// the address from Leases and a test sees it listed before and gone
// after. The stub has no other address types.

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasekeeper/leasekeeper/internal/maasapi"
	"github.com/leasekeeper/leasekeeper/internal/maasmodel"
)

// API2Path is the public API 2.0 root.
const API2Path = "/MAAS/api/2.0/"

// MAAS's words for API 2.0 answers.
const (
	MsgInvalidAPIKey     = "Authorization Error: Invalid API key."
	MsgForceNeedsAdmin   = "Force-releasing an IP address requires admin privileges."
	MsgListAllNeedsAdmin = "Listing all IP addresses requires admin privileges."
	// MsgDeletedTwice is Django's refusal to delete a model instance
	// already deleted (django/db/models/base.py, Model.delete).
	MsgDeletedTwice        = "StaticIPAddress object can't be deleted because its id attribute is set to None."
	MsgIPParamNotIP        = "Parameter 'ip' must contain an IP address."
	msgReleaseAbsentForced = "IP address %s does not exist."
	msgReleaseAbsent       = "IP address %s does not exist, is not the correct type of address, or does not belong to the requesting user.\nIf you are sure you want to release this address, use force=true as a MAAS administrator."
)

// APIUser is a MAAS user holding an API key.
type APIUser struct {
	Name string
	// Admin: in MAAS's Administrators group, which gives (3.8 and later)
	// the permissions to list every address and force a release.
	Admin bool
	// Superuser is is_superuser as whoami shows it: set at an
	// administrator's creation, it says nothing of the group later.
	Superuser bool
}

// Administrator is a user as MAAS creates an administrator: superuser
// and in the Administrators group.
func Administrator(name string) APIUser { return APIUser{Name: name, Admin: true, Superuser: true} }

// SetInterfaces has the region know mac as the named interfaces of a
// machine (its NIC and the VLANs or bond on it, which share the NIC's
// MAC) instead of one unknown interface: an observed record for mac is
// linked to each.
func (s *Server) SetInterfaces(mac string, names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.api2.ifaces == nil {
		s.api2.ifaces = map[string][]string{}
	}
	s.api2.ifaces[strings.ToLower(mac)] = slices.Clone(names)
}

// interfacesOf are the region's interfaces with mac. s.mu is held.
func (s *Server) interfacesOf(mac string) []string {
	if n, ok := s.api2.ifaces[strings.ToLower(mac)]; ok && len(n) > 0 {
		return n
	}
	return []string{"eth0"}
}

// API2Request is one request the API 2.0 stand-in answered.
type API2Request struct {
	At     time.Time `json:"at"`
	Method string    `json:"method"`
	Path   string    `json:"path"`
	Op     string    `json:"op,omitempty"`
	IP     string    `json:"ip,omitempty"`
	User   string    `json:"user,omitempty"`
	Status int       `json:"status"`
}

type api2State struct {
	keys     map[string]APIUser  // "consumer:token:secret" → user
	ifaces   map[string][]string // MAC → a machine's interface names (SetInterfaces)
	requests []API2Request
	skew     time.Duration // SetClockSkew
	srv      *http.Server
	url      string
}

// SetClockSkew sets the region's clock d ahead of this host's, for the
// OAuth timestamp check (see authenticate).
func (s *Server) SetClockSkew(d time.Duration) {
	s.mu.Lock()
	s.api2.skew = d
	s.mu.Unlock()
}

// AddAPIKey registers an API key ("consumer:token:secret") for user.
func (s *Server) AddAPIKey(key string, user APIUser) error {
	k, err := maasapi.ParseKey(key)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.api2.keys == nil {
		s.api2.keys = map[string]APIUser{}
	}
	s.api2.keys[k.Consumer+":"+k.Token+":"+k.Secret] = user
	return nil
}

// API2Requests is every request the API 2.0 stand-in answered, in order.
func (s *Server) API2Requests() []API2Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.api2.requests)
}

// Releases counts the op=release requests for ip.
func (s *Server) Releases(ip string) int {
	n := 0
	for _, r := range s.API2Requests() {
		if r.Op == "release" && r.IP == ip {
			n++
		}
	}
	return n
}

// StartAPI2 serves the API 2.0 stand-in over plain HTTP on a random
// loopback port (MAAS's 5240) and returns the URL `maas login` would
// take (http://127.0.0.1:PORT/MAAS/). Close stops it too.
func (s *Server) StartAPI2() (string, error) { return s.startAPI2(nil) }

// StartAPI2TLS serves the API 2.0 stand-in over TLS, as a MAAS with TLS
// enabled does (`maas config-tls enable KEY CERT --cacert CA`, port
// 5443 by default; nginx serves it with the operator's certificate:
// src/maasserver/management/commands/config_tls.py,
// src/maasserver/templates/http/regiond.nginx.conf.template), with a
// certificate for 127.0.0.1 signed by the stub's CA (PKI().CAPEM), and
// returns the URL `maas login` would take (https://127.0.0.1:PORT/MAAS/).
// Close stops it too.
func (s *Server) StartAPI2TLS() (string, error) {
	certPEM, keyPEM, err := s.pki.Sign("", "127.0.0.1")
	if err != nil {
		return "", err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return "", err
	}
	return s.startAPI2(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
}

// startAPI2 serves API2Handler on a random loopback port, over TLS when
// tc is not nil.
func (s *Server) startAPI2(tc *tls.Config) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: s.API2Handler(), ReadHeaderTimeout: 10 * time.Second}
	u := "http://" + ln.Addr().String() + "/MAAS/"
	if tc != nil {
		ln = tls.NewListener(ln, tc)
		srv.ErrorLog = log.New(io.Discard, "", 0) // a client refusing the certificate is a test's point
		u = "https://" + ln.Addr().String() + "/MAAS/"
	}
	s.mu.Lock()
	s.api2.srv, s.api2.url = srv, u
	s.mu.Unlock()
	go func() {
		<-s.closing
		srv.Close()
	}()
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	return u, nil
}

// API2Handler answers API 2.0 requests (see the top of this file).
func (s *Server) API2Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := API2Request{At: time.Now(), Method: r.Method, Path: r.URL.Path}
		rec.Status = s.serveAPI2(w, r, &rec)
		s.mu.Lock()
		s.api2.requests = append(s.api2.requests, rec)
		s.mu.Unlock()
	})
}

func text(w http.ResponseWriter, code int, msg string) int {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	fmt.Fprint(w, msg)
	return code
}

// authenticate finds the key's user as MAASAPIAuthentication does.
func (s *Server) authenticate(r *http.Request) (APIUser, int, string) {
	p, ok := maasapi.ParseAuthorization(r.Header.Get("Authorization"))
	if !ok {
		return APIUser{}, http.StatusUnauthorized, "Unauthorised" // anonymous: piston's challenge
	}
	for _, k := range []string{"oauth_consumer_key", "oauth_token", "oauth_signature", "oauth_signature_method", "oauth_timestamp", "oauth_nonce"} {
		if p[k] == "" {
			return APIUser{}, http.StatusBadRequest, "Bad Request: Missing OAuth parameter " + k
		}
	}
	ts, err := strconv.ParseInt(p["oauth_timestamp"], 10, 64)
	if err != nil {
		return APIUser{}, http.StatusBadRequest, "Bad Request: oauth_timestamp has an unexpected type"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, u := range s.api2.keys {
		k, _ := maasapi.ParseKey(key)
		if k.Consumer != p["oauth_consumer_key"] {
			continue
		}
		if k.Token != p["oauth_token"] {
			return APIUser{}, http.StatusUnauthorized, "Authorization Error: 'Invalid access token: " + p["oauth_token"] + "'"
		}
		// piston3's OAuthServer checks the timestamp before the
		// signature: one more than timestamp_threshold (300 s) older than
		// the region's clock is refused (a later one is not), worded
		// as src/maasserver/api/auth.py's OAuthUnauthorized does.
		if now := time.Now().Add(s.api2.skew).Unix(); now-ts > 300 {
			return APIUser{}, http.StatusUnauthorized, fmt.Sprintf("Authorization Error: 'Expired timestamp: given %d and now %d has a greater difference than threshold 300'", ts, now)
		}
		// A wrong signature: piston3's OAuthServer names the base string
		// it expected, which for PLAINTEXT is the right signature ("&"
		// and the token's secret), and MAAS passes that on
		// (src/maasserver/api/auth.py, OAuthUnauthorized: "Authorization
		// Error: %r").
		if p["oauth_signature_method"] != "PLAINTEXT" || p["oauth_signature"] != "&"+k.Secret {
			return APIUser{}, http.StatusUnauthorized, "Authorization Error: 'Invalid signature. Expected signature base string: &" + k.Secret + "'"
		}
		return u, 0, ""
	}
	return APIUser{}, http.StatusUnauthorized, MsgInvalidAPIKey
}

func (s *Server) serveAPI2(w http.ResponseWriter, r *http.Request, rec *API2Request) int {
	s.mu.Lock()
	down := time.Now().Before(s.windowEnds)
	s.mu.Unlock()
	if down {
		// regiond away: nginx answers for it.
		return text(w, http.StatusServiceUnavailable, "503 Service Temporarily Unavailable")
	}
	u, code, msg := s.authenticate(r)
	if code != 0 {
		return text(w, code, msg)
	}
	rec.User = u.Name
	switch r.URL.Path {
	case API2Path + "users/":
		if r.Method != http.MethodGet || r.URL.Query().Get("op") != "whoami" {
			return text(w, http.StatusBadRequest, "Unrecognised signature: method="+r.Method+" op="+r.URL.Query().Get("op"))
		}
		rec.Op = "whoami"
		return writeJSON(w, http.StatusOK, map[string]any{"username": u.Name, "is_superuser": u.Superuser, "is_local": true,
			"email": u.Name + "@example.com", "resource_uri": "/MAAS/api/2.0/users/" + u.Name + "/"})
	case API2Path + "ipaddresses/":
	default:
		return text(w, http.StatusNotFound, "Not Found")
	}
	switch r.Method {
	case http.MethodGet:
		if op := r.URL.Query().Get("op"); op != "" {
			return text(w, http.StatusBadRequest, "Unrecognised signature: method=GET op="+op)
		}
		return s.readIPs(w, r, u, rec)
	case http.MethodPost:
		if err := r.ParseMultipartForm(1 << 20); err != nil && err != http.ErrNotMultipart {
			return text(w, http.StatusBadRequest, err.Error())
		}
		rec.Op, rec.IP = r.PostForm.Get("op"), r.PostForm.Get("ip")
		if rec.Op != "release" {
			return text(w, http.StatusBadRequest, "Unrecognised signature: method=POST op="+rec.Op)
		}
		return s.release(w, r, u)
	default:
		return text(w, http.StatusMethodNotAllowed, "Method Not Allowed")
	}
}

// stringBool is formencode's StringBool as MAAS's get_optional_param
// uses it; ok is false for a value it refuses.
func stringBool(v string) (b, ok bool) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "false", "0", "off", "no", "f", "n":
		return false, true
	case "true", "1", "on", "yes", "t", "y":
		return true, true
	}
	return false, false
}

func (s *Server) readIPs(w http.ResponseWriter, r *http.Request, u APIUser, rec *API2Request) int {
	q := r.URL.Query()
	all, ok := stringBool(q.Get("all"))
	if !ok {
		return text(w, http.StatusBadRequest, "all: Value should be 'true' or 'false'")
	}
	var want netip.Addr
	if v := q.Get("ip"); v != "" || q.Has("ip") {
		rec.IP = v
		a, err := netip.ParseAddr(v)
		if err != nil {
			return text(w, http.StatusBadRequest, MsgIPParamNotIP)
		}
		want = a
	}
	if all && !u.Admin {
		return text(w, http.StatusForbidden, MsgListAllNeedsAdmin)
	}
	out := []map[string]any{}
	// Only DISCOVERED records exist here: listed for an administrator
	// asking for all; anyone else sees only their own USER_RESERVED ones.
	if all {
		s.mu.Lock()
		var ips []string
		for _, ip := range s.view.IPs() {
			if !want.IsValid() || ip == want.String() {
				ips = append(ips, ip)
			}
		}
		slices.Sort(ips)
		ifID := 1000
		for _, ip := range ips {
			l, _ := s.view.Lease(ip)
			ifaces := s.recordInterfaces(l, &ifID)
			sub := ""
			for _, sn := range s.subnets {
				if sn.CIDR.Contains(netip.MustParseAddr(ip)) {
					sub = sn.CIDR.String()
					break
				}
			}
			out = append(out, map[string]any{
				"alloc_type": maasapi.AllocDiscovered, "alloc_type_name": "Observed",
				// MAAS 3.6 and later stamp created with the region's
				// clock at the upsert (db/repositories/
				// staticipaddress.py, create_or_update); 3.5 kept the
				// lease's time. The stub gives the commit's: nothing
				// of leasekeeper reads it.
				"created": time.Unix(l.Timestamp, 0).UTC().Format("2006-01-02T15:04:05.000"),
				"ip":      ip, "owner": nil,
				"interface_set": ifaces,
				"subnet":        map[string]any{"cidr": sub},
				"resource_uri":  "/MAAS/api/2.0/ipaddresses/",
			})
		}
		s.mu.Unlock()
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	json.NewEncoder(w).Encode(out) //nolint:errcheck
	return http.StatusOK
}

// recordInterfaces are the interface_set of l's record: every interface
// with each MAC linked to it (more than one MAC only when a client left
// one behind: internal/maasmodel), ids counted from *id. s.mu is held.
func (s *Server) recordInterfaces(l maasmodel.Lease, id *int) []map[string]any {
	var out []map[string]any
	for _, mac := range l.MACs {
		for _, name := range s.interfacesOf(mac) {
			out = append(out, map[string]any{"id": *id, "name": name, "type": "unknown", "mac_address": mac,
				"system_id": nil, "enabled": true})
			*id++
		}
	}
	return out
}

// linkCount is how many interfaces l's record is linked to. s.mu is held.
func (s *Server) linkCount(l maasmodel.Lease) int {
	n := 0
	for _, mac := range l.MACs {
		n += len(s.interfacesOf(mac))
	}
	return n
}

func (s *Server) release(w http.ResponseWriter, r *http.Request, u APIUser) int {
	ip := r.PostForm.Get("ip")
	if ip == "" {
		return text(w, http.StatusBadRequest, "No provided ip!")
	}
	force, ok1 := stringBool(r.PostForm.Get("force"))
	discovered, ok2 := stringBool(r.PostForm.Get("discovered"))
	if !ok1 || !ok2 {
		return text(w, http.StatusBadRequest, "force, discovered: Value should be 'true' or 'false'")
	}
	if force && !u.Admin {
		return text(w, http.StatusForbidden, MsgForceNeedsAdmin)
	}
	a, err := netip.ParseAddr(ip)
	if err != nil {
		// ReleaseIPForm: a GenericIPAddressField.
		return writeJSON(w, http.StatusBadRequest, map[string][]string{"ip": {"Enter a valid IPv4 or IPv6 address."}})
	}
	s.mu.Lock()
	l, found := s.view.Lease(a.String())
	// Only DISCOVERED records exist here: force+discovered finds it;
	// force alone excludes it; no force looks for the user's own
	// reservation, of which there are none.
	found = found && force && discovered
	twice := found && s.linkCount(l) > 1
	if found && !twice {
		s.view.Delete(a.String())
	}
	s.mu.Unlock()
	if twice {
		return text(w, http.StatusInternalServerError, MsgDeletedTwice)
	}
	if !found {
		if force {
			return text(w, http.StatusBadRequest, fmt.Sprintf(msgReleaseAbsentForced, ip))
		}
		return text(w, http.StatusBadRequest, fmt.Sprintf(msgReleaseAbsent, ip))
	}
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}

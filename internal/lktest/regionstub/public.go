package regionstub

import (
	"crypto/tls"
	"net"
	"net/http"
	"time"
)

// PublicAPI stands in for a MAAS region's public ports, where a
// misconfigured agent may send its leases: 5240 (plain HTTP, nginx) and
// 5443 (HTTPS, nginx with the certificate set by `maas config-tls`). Both
// pass /MAAS/a/ to the public API app, which has no v3internal routes
// (src/maasapiserver/main.py, craft_public_app: "DO NOT include the
// v3Internal router in the user app"): every request is FastAPI's 404.
// With TLS it serves the stub PKI's server certificate, so a client
// trusting the CA gets as far as the 404 (a real 5443 certificate usually
// comes from another CA, and the handshake fails first).
type PublicAPI struct {
	srv *http.Server
	ln  net.Listener
	url string
}

// StartPublicAPI serves the public API stand-in on a random loopback
// port, with TLS (5443) or without (5240).
func StartPublicAPI(p *PKI, withTLS bool) (*PublicAPI, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a := &PublicAPI{ln: ln, url: "https://" + ln.Addr().String() + LeasesPath}
	a.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	if withTLS {
		a.srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{p.server}, MinVersion: tls.VersionTLS12}
		go a.srv.Serve(tls.NewListener(ln, a.srv.TLSConfig)) //nolint:errcheck // ends with Close
	} else {
		go a.srv.Serve(ln) //nolint:errcheck // ends with Close
	}
	return a, nil
}

// URL is the leases URL an agent misconfigured with this port would
// use: https, this address, MAAS's leases path.
func (a *PublicAPI) URL() string { return a.url }

// Close stops it.
func (a *PublicAPI) Close() error { return a.srv.Close() }

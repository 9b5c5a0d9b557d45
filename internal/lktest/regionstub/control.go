package regionstub

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"time"
)

// ControlHandler lets a demo or an end-to-end test drive a running stub
// over plain HTTP (serve it on loopback only):
//
//	GET  /items[?ip=IP]                            items taken, JSON
//	GET  /requests                                 every request seen, JSON
//	GET  /leases                                   the region's view: IP → lease, JSON
//	GET  /subnets                                  MAAS's subnets, JSON
//	POST /subnets?add=CIDR[=FIRST-LAST[+…]]        add one (see ParseSubnet)
//	DELETE /subnets?cidr=CIDR                      remove one
//	POST /fail?for=30s[&status=503][&retry_after=5][&close=1][&accept=1]
//	POST /fail?next=N[&status=…]                   the next N requests instead of a window
//	POST /poison?ip=IP[&status=500]                DELETE /poison?ip=IP undoes it
//	POST /delay?d=200ms
//	POST /flaky?p=0.3[&seed=1]
//	POST /clear                                    end every fault
func (s *Server) ControlHandler() http.Handler {
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v) //nolint:errcheck
	}
	bad := func(w http.ResponseWriter, msg string) { http.Error(w, msg, http.StatusBadRequest) }
	mux.HandleFunc("GET /items", func(w http.ResponseWriter, r *http.Request) {
		if ip := r.URL.Query().Get("ip"); ip != "" {
			reply(w, s.ItemsFor(ip))
			return
		}
		reply(w, s.Items())
	})
	mux.HandleFunc("GET /requests", func(w http.ResponseWriter, r *http.Request) { reply(w, s.Requests()) })
	mux.HandleFunc("GET /leases", func(w http.ResponseWriter, r *http.Request) { reply(w, s.Leases()) })
	mux.HandleFunc("GET /subnets", func(w http.ResponseWriter, r *http.Request) {
		type subnet struct {
			CIDR   string   `json:"cidr"`
			Ranges []string `json:"ranges"`
		}
		out := []subnet{}
		for _, sub := range s.Subnets() {
			x := subnet{CIDR: sub.CIDR.String(), Ranges: []string{}}
			for _, r := range sub.Ranges {
				x.Ranges = append(x.Ranges, r.String())
			}
			out = append(out, x)
		}
		reply(w, out)
	})
	mux.HandleFunc("POST /subnets", func(w http.ResponseWriter, r *http.Request) {
		sub, err := ParseSubnet(r.URL.Query().Get("add"))
		if err != nil {
			bad(w, "add: "+err.Error())
			return
		}
		s.AddSubnet(sub)
	})
	mux.HandleFunc("DELETE /subnets", func(w http.ResponseWriter, r *http.Request) {
		p, err := netip.ParsePrefix(r.URL.Query().Get("cidr"))
		if err != nil {
			bad(w, "cidr: want a prefix")
			return
		}
		s.SetSubnets(slices.DeleteFunc(s.Subnets(), func(sub Subnet) bool { return sub.CIDR == p.Masked() }))
	})
	mux.HandleFunc("POST /fail", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		f := Fault{Status: http.StatusServiceUnavailable, RetryAfter: q.Get("retry_after"),
			Close: q.Get("close") == "1", Accept: q.Get("accept") == "1"}
		if v := q.Get("status"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 100 || n > 599 {
				bad(w, "status: want an HTTP status code")
				return
			}
			f.Status = n
		}
		if v := q.Get("next"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				bad(w, "next: want a count")
				return
			}
			s.FailNext(n, f)
			return
		}
		d, err := time.ParseDuration(q.Get("for"))
		if err != nil {
			bad(w, "for: want a duration")
			return
		}
		s.FailFor(d, f)
	})
	mux.HandleFunc("POST /poison", func(w http.ResponseWriter, r *http.Request) {
		status, _ := strconv.Atoi(r.URL.Query().Get("status"))
		s.Poison(r.URL.Query().Get("ip"), status)
	})
	mux.HandleFunc("DELETE /poison", func(w http.ResponseWriter, r *http.Request) {
		s.Unpoison(r.URL.Query().Get("ip"))
	})
	mux.HandleFunc("POST /delay", func(w http.ResponseWriter, r *http.Request) {
		d, err := time.ParseDuration(r.URL.Query().Get("d"))
		if err != nil {
			bad(w, "d: want a duration")
			return
		}
		s.SetDelay(d)
	})
	mux.HandleFunc("POST /flaky", func(w http.ResponseWriter, r *http.Request) {
		p, err := strconv.ParseFloat(r.URL.Query().Get("p"), 64)
		if err != nil || p < 0 || p > 1 {
			bad(w, "p: want a fraction in [0, 1]")
			return
		}
		seed, _ := strconv.ParseUint(r.URL.Query().Get("seed"), 10, 64)
		s.SetFlaky(p, seed)
	})
	mux.HandleFunc("POST /clear", func(w http.ResponseWriter, r *http.Request) { s.ClearFaults() })
	return mux
}

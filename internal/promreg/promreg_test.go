package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestAllOrNone(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := prometheus.NewCounter(prometheus.CounterOpts{Name: "a_total"})
	b := prometheus.NewCounter(prometheus.CounterOpts{Name: "b_total"})
	if err := Register(reg, b); err != nil {
		t.Fatal(err)
	}
	// b is taken: a must not stay registered either.
	if err := Register(reg, a, prometheus.NewCounter(prometheus.CounterOpts{Name: "b_total"})); err == nil {
		t.Fatal("duplicate registration accepted")
	}
	if err := reg.Register(a); err != nil {
		t.Fatalf("a was left registered: %v", err)
	}
	Unregister(reg, a, b)
	if err := Register(reg, a, b); err != nil {
		t.Fatalf("after Unregister: %v", err)
	}
	if err := Register(nil, a); err != nil {
		t.Fatal(err)
	}
	Unregister(nil, a)
}

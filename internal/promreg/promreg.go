// Package promreg registers a component's Prometheus collectors as a
// unit: all or none, and all removed together (a component rebuilt on
// reload registers its metrics again).
package promreg

import "github.com/prometheus/client_golang/prometheus"

// Register registers every collector on reg, or none: on an error the
// ones already registered are removed again. A nil reg registers nothing.
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			Unregister(reg, cs[:i]...)
			return err
		}
	}
	return nil
}

// Unregister removes the collectors from reg (nil: nothing).
func Unregister(reg prometheus.Registerer, cs ...prometheus.Collector) {
	if reg == nil {
		return
	}
	for _, c := range cs {
		reg.Unregister(c)
	}
}

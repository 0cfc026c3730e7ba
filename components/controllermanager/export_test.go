package controllermanager

import "github.com/prometheus/client_golang/prometheus"

// AddressCounter returns a function that reports how many addresses the
// IPAM controller of m has written so far: the count of its create-to-address
// histogram, gathered alone so that the benchmarks can poll it cheaply.
func AddressCounter(m *Manager) func() uint64 {
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.addressLatency)
	return func() uint64 {
		families, err := reg.Gather()
		if err != nil || len(families) == 0 || len(families[0].GetMetric()) == 0 {
			return 0
		}
		return families[0].GetMetric()[0].GetHistogram().GetSampleCount()
	}
}

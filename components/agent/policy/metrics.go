package policy

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// dropsTimeout bounds the switch read of one scrape.
const dropsTimeout = 5 * time.Second

// metrics are the enforcer's.
type metrics struct {
	updates  *prometheus.CounterVec
	duration prometheus.Histogram
	drops    *prometheus.Desc
	e        *Enforcer
}

func newMetrics(reg prometheus.Registerer, e *Enforcer) (*metrics, error) {
	m := &metrics{
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kos_agent_policy_updates_total",
			Help: "Updates of a network's policy on the switch, by result: ok, error (retried), invalid (a NodeNetworkPolicy that does not read, ignored).",
		}, []string{"result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kos_agent_policy_update_duration_seconds",
			Help:    "How long setting one network's policy on the switch took.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
		drops: prometheus.NewDesc("kos_agent_policy_dropped_packets_total",
			"Packets that policy dropped at a local attachment isolated for a direction (ingress: to it, egress: from it) because no rule allowed their connection; policies names the policies that isolate it for that direction.",
			[]string{"vni", "address", "direction", "policies"}, nil),
		e: e,
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.updates, m.duration, m} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Describe implements prometheus.Collector for the drops.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) { ch <- m.drops }

// Collect implements prometheus.Collector for the drops: one read of the
// switch's policy flows per scrape, when the switch counts drops.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	counter, ok := m.e.sw.(DropCounter)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), dropsTimeout)
	defer cancel()
	drops, err := counter.PolicyDrops(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(m.drops, err)
		return
	}
	type port struct {
		mac    string
		egress bool
	}
	// Which policies isolate each selected attachment, by MAC and
	// direction, and its address.
	names := map[port][]string{}
	addrs := map[string]string{}
	m.e.mu.Lock()
	for vni, np := range m.e.applied {
		for _, p := range np.Policies {
			for _, a := range p.Selected {
				mac := v1alpha1.MACAddress(vni, a).String()
				addrs[mac] = a.String()
				if p.Ingress {
					names[port{mac, false}] = append(names[port{mac, false}], p.Name)
				}
				if p.Egress {
					names[port{mac, true}] = append(names[port{mac, true}], p.Name)
				}
			}
		}
	}
	m.e.mu.Unlock()
	for _, d := range drops {
		mac := d.MAC.String()
		direction := "ingress"
		if d.Egress {
			direction = "egress"
		}
		policies := slices.Compact(slices.Sorted(slices.Values(names[port{mac, d.Egress}])))
		ch <- prometheus.MustNewConstMetric(m.drops, prometheus.CounterValue, float64(d.Packets),
			strconv.FormatUint(uint64(d.VNI), 10), addrs[mac], direction, strings.Join(policies, ","))
	}
}

package policy

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric"
)

// dropsTimeout bounds the switch read of one scrape.
const dropsTimeout = 5 * time.Second

// metrics are the enforcer's.
type metrics struct {
	updates  *prometheus.CounterVec
	duration prometheus.Histogram
	drops    *prometheus.Desc
	e        *Enforcer

	// tally turns the switch's drop counts, which restart from 0 each
	// time a network's flows are rewritten, into counters per policy.
	// Lock order: tally.mu, then the enforcer's mu.
	tally dropTally
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
			"Packets dropped at this node's attachments that the policy namespace/policy isolates for the direction (ingress: to them, egress: from them) in network vni, because no rule of the policies isolating them allowed their connection. A packet dropped at an attachment that several policies isolate counts under each.",
			[]string{"namespace", "policy", "vni", "direction"}, nil),
		e:     e,
		tally: dropTally{last: map[dropKey]uint64{}, totals: map[policyKey]uint64{}},
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
	// One scrape at a time: the tally compares each read with the last.
	m.tally.mu.Lock()
	defer m.tally.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), dropsTimeout)
	defer cancel()
	drops, err := counter.PolicyDrops(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(m.drops, err)
		return
	}
	m.e.mu.Lock()
	isolating := isolatingPolicies(m.e.applied)
	m.e.mu.Unlock()
	for k, total := range m.tally.add(drops, isolating) {
		namespace, name, ok := strings.Cut(k.policy, "/")
		if !ok {
			namespace, name = "", k.policy
		}
		ch <- prometheus.MustNewConstMetric(m.drops, prometheus.CounterValue, float64(total),
			namespace, name, strconv.FormatUint(uint64(k.vni), 10), directionName(k.egress))
	}
}

func directionName(egress bool) string {
	if egress {
		return "egress"
	}
	return "ingress"
}

// dropKey is an isolated attachment's drop flow: a network, a MAC and a
// direction.
type dropKey struct {
	vni    uint32
	mac    string
	egress bool
}

// policyKey is a series of the drops: a policy isolating a direction in a
// network.
type policyKey struct {
	vni    uint32
	egress bool
	policy string
}

// isolatingPolicies returns, for each attachment isolated by the policies
// set, the names of the policies that isolate it, sorted.
func isolatingPolicies(applied map[uint32]fabric.NetworkPolicy) map[dropKey][]string {
	names := map[dropKey][]string{}
	for vni, np := range applied {
		for _, p := range np.Policies {
			for _, a := range p.Selected {
				mac := v1alpha1.MACAddress(vni, a).String()
				if p.Ingress {
					k := dropKey{vni, mac, false}
					names[k] = append(names[k], p.Name)
				}
				if p.Egress {
					k := dropKey{vni, mac, true}
					names[k] = append(names[k], p.Name)
				}
			}
		}
	}
	for k, n := range names {
		names[k] = slices.Compact(slices.Sorted(slices.Values(n)))
	}
	return names
}

// dropTally adds up the drops of each policy across reads of the switch.
// The switch counts per isolated attachment, from 0 each time its
// network's flows are rewritten (every update of the network's policy,
// which the enforcer reads just before: rewrite) and when the switch
// loses its flows: a count below the last read is one since such a loss,
// and what was dropped between the last read and the loss is not counted.
type dropTally struct {
	mu sync.Mutex
	// last is each drop flow's count at the last read.
	last map[dropKey]uint64
	// totals are the series: every policy that isolates something now,
	// whatever it dropped.
	totals map[policyKey]uint64
}

// rewrite runs set, which rewrites network vni's flows on the switch, and
// keeps the drops they counted: it reads them into the totals just before,
// and takes their counts to start again from 0 once set succeeded. Only
// what is dropped between the read and the rewrite is lost. Scrapes wait
// meanwhile, so that none reads the counts in between.
func (m *metrics) rewrite(ctx context.Context, vni uint32, set func() error) error {
	counter, ok := m.e.sw.(NetworkDropCounter)
	if !ok {
		return set()
	}
	m.tally.mu.Lock()
	defer m.tally.mu.Unlock()
	drops, err := counter.NetworkPolicyDrops(ctx, vni)
	if err != nil {
		// The update matters more than its drops: those since the last
		// scrape are lost, as they would be without this read.
		klog.FromContext(ctx).V(2).Info("Reading a network's policy drops before its update failed", "vni", vni, "err", err)
	} else {
		m.e.mu.Lock()
		isolating := isolatingPolicies(m.e.applied)
		m.e.mu.Unlock()
		m.tally.fold(drops, isolating)
	}
	if err := set(); err != nil {
		return err
	}
	for k := range m.tally.last {
		if k.vni == vni {
			m.tally.last[k] = 0
		}
	}
	return nil
}

// fold adds to the totals what each drop flow counted since the last read
// (all of it when the count is below the last one: its flow was
// rewritten), under each policy that isolates its attachment.
func (t *dropTally) fold(drops []fabric.PolicyDrop, isolating map[dropKey][]string) {
	for _, d := range drops {
		k := dropKey{d.VNI, d.MAC.String(), d.Egress}
		delta := d.Packets
		if last, ok := t.last[k]; ok && d.Packets >= last {
			delta = d.Packets - last
		}
		t.last[k] = d.Packets
		for _, p := range isolating[k] {
			t.totals[policyKey{k.vni, k.egress, p}] += delta
		}
	}
}

// add takes a read of the switch's drops and the policies that isolate
// each attachment now, and returns the totals of the policies that
// isolate something. A policy that isolates nothing any longer is
// forgotten, and counts from 0 should it come back.
func (t *dropTally) add(drops []fabric.PolicyDrop, isolating map[dropKey][]string) map[policyKey]uint64 {
	t.fold(drops, isolating)
	// A drop flow that is gone has no count to compare with any more.
	seen := make(map[dropKey]bool, len(drops))
	for _, d := range drops {
		seen[dropKey{d.VNI, d.MAC.String(), d.Egress}] = true
	}
	for k := range t.last {
		if !seen[k] {
			delete(t.last, k)
		}
	}
	live := map[policyKey]bool{}
	for k, names := range isolating {
		for _, p := range names {
			pk := policyKey{k.vni, k.egress, p}
			live[pk] = true
			t.totals[pk] += 0
		}
	}
	for k := range t.totals {
		if !live[k] {
			delete(t.totals, k)
		}
	}
	return t.totals
}

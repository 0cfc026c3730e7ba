package agent_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric/logging"
	kosinformers "github.com/kos-sdn/kos/components/generated/informers/externalversions/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/poll"
)

// The benchmark's shape: benchAgents nodes, each with an agent, and
// benchNetworks virtual networks, each spread over benchSpread consecutive
// nodes, so that each node has attachments in a few networks only.
const (
	benchAgents   = 50
	benchNetworks = 25
	benchSpread   = 5
)

var benchRate = flag.Float64("agent.rate", 20, "attachments BenchmarkAgents creates per second")

// BenchmarkAgents runs benchAgents agents with logging fabrics as
// goroutines against one KOS control plane (kos-apiserver, its etcd and the
// real controllers), creates b.N attachments at a steady rate
// (-agent.rate), and reports, from the server's write times, the p50 and
// p99 latency from an attachment's creation to its readiness (the agent's
// status write), and per agent the notifications received against the
// attachments relevant to it. all-notifications is what one watch on every
// attachment received meanwhile: what each agent would get without the
// 1+R informers. Run it as
//
//	go test ./components/agent/ -run '^$' -bench Agents -benchtime 1000x
func BenchmarkAgents(b *testing.B) {
	k := newAPI(b)
	startControllers(b)
	for j := range benchNetworks {
		k.subnet(fmt.Sprintf("s%d", j), fmt.Sprintf("10.%d.0.0/16", 100+j), uint32(1001+j))
	}
	poll.Until(b, settle, "the subnets are validated", func(context.Context) error {
		list, err := k.client.NetworkV1alpha1().Subnets(k.ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, s := range list.Items {
			if !s.Status.Validated {
				return fmt.Errorf("subnet %s is not validated", s.Name)
			}
		}
		return nil
	})
	agents := make([]*runningAgent, benchAgents)
	for i := range agents {
		agents[i] = startAgent(b, agentConfig(b, benchNode(k, i), fmt.Sprintf("192.168.0.%d", i+1), logging.New()))
	}
	// all watches every attachment of the namespace, as an agent without
	// relevance filtering would.
	var all atomic.Int64
	allInformer := kosinformers.NewNetworkAttachmentInformer(kosClient(b), k.ns, 0, cache.Indexers{})
	count := func(any) { all.Add(1) }
	if _, err := allInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: count, UpdateFunc: func(_, o any) { count(o) }, DeleteFunc: count,
	}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go allInformer.RunWithContext(ctx)

	var seq int
	b.Run(fmt.Sprintf("agents=%d", benchAgents), func(b *testing.B) {
		k := &api{t: b, ctx: k.ctx, client: k.client, ns: k.ns}
		before := make([]float64, len(agents))
		for i, a := range agents {
			before[i] = a.counter(b, "kos_agent_attachment_notifications_total", nil)
		}
		allBefore := all.Load()
		names := make([]string, 0, b.N)
		networkOf := map[string]int{}
		b.ResetTimer()
		ticker := time.NewTicker(time.Duration(float64(time.Second) / *benchRate))
		for range b.N {
			<-ticker.C
			j := seq % benchNetworks
			name := fmt.Sprintf("a%d", seq)
			k.attachment(name, benchNode(k, benchNodeOf(seq)), fmt.Sprintf("s%d", j))
			names = append(names, name)
			networkOf[name] = j
			seq++
		}
		ticker.Stop()
		var atts []v1alpha1.NetworkAttachment
		poll.Until(b, 5*time.Minute, "every attachment is ready", func(context.Context) error {
			list, err := k.client.NetworkV1alpha1().NetworkAttachments(k.ns).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				return err
			}
			atts = list.Items
			ready := 0
			for _, a := range atts {
				if a.Status.HostIP != "" {
					ready++
				}
			}
			if ready < seq {
				return fmt.Errorf("%d of %d ready", ready, seq)
			}
			return nil
		})
		b.StopTimer()

		mine := sets.New(names...)
		var latencies []time.Duration
		for _, a := range atts {
			if !mine.Has(a.Name) {
				continue
			}
			created, ok1 := a.ExtendedMetadata.Writes.Time(v1alpha1.SectionSpec)
			ready, ok2 := a.ExtendedMetadata.Writes.Time(v1alpha1.SectionImpl)
			if ok1 && ok2 {
				latencies = append(latencies, ready.Sub(created.Time))
			}
		}
		slices.Sort(latencies)

		// Node n's relevant networks are those it has attachments in; its
		// relevant attachments are this run's attachments in them.
		relevantNets := make([]sets.Set[int], benchAgents)
		for i := range relevantNets {
			relevantNets[i] = sets.New[int]()
		}
		for s := range seq {
			relevantNets[benchNodeOf(s)].Insert(s % benchNetworks)
		}
		var notified, relevant float64
		for i, a := range agents {
			notified += a.counter(b, "kos_agent_attachment_notifications_total", nil) - before[i]
			for _, name := range names {
				if relevantNets[i].Has(networkOf[name]) {
					relevant++
				}
			}
		}
		b.ReportMetric(msec(percentile(latencies, 0.50)), "p50-ready-ms")
		b.ReportMetric(msec(percentile(latencies, 0.99)), "p99-ready-ms")
		b.ReportMetric(notified/benchAgents, "notifications/agent")
		b.ReportMetric(relevant/benchAgents, "relevant-atts/agent")
		b.ReportMetric(float64(all.Load()-allBefore), "all-notifications")
		b.ReportMetric(float64(b.N), "atts")
	})
}

// benchNodeOf returns the agent index of the s-th attachment: attachments of
// network j land on benchSpread consecutive nodes starting at node 2j.
func benchNodeOf(s int) int {
	j := s % benchNetworks
	return (2*j + (s/benchNetworks)%benchSpread) % benchAgents
}

func benchNode(k *api, i int) string { return k.node(fmt.Sprintf("n%02d", i)) }

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}

func msec(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

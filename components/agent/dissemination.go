package agent

import (
	"time"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// Values of the address_written label of the dissemination histogram.
const (
	// writtenWhileWatched: the agent watched the attachment's network when
	// the server wrote its address, so the latency is how long the address
	// took to reach this switch.
	writtenWhileWatched = "while_watched"
	// writtenBeforeWatched: the address was written before the agent
	// watched the network (the agent started, or the network just became
	// relevant to the node), so the latency tells how old the attachment
	// was when this node caught up with it.
	writtenBeforeWatched = "before_watched"
)

// newlyRemote reports whether an address that held had now holds now for
// the first time as the remote attachment it is: a remote attachment's flows
// reprogrammed after being lost, or towards a new host, are not new.
func newlyRemote(had, now placement) bool {
	return now.kind == remote && now.owner != "" && (had.kind != remote || had.owner != now.owner)
}

// dissemination returns how long after the server wrote the address of a
// remote attachment (its status.address section in
// extendedMetadata.writes) its flows were in the switch (programmed), and
// whether that address was written while the agent watched its network
// (since watchedSince; watched false means it does not). The times are of
// two clocks, the server's and the agent's: a negative difference from
// skew counts as zero. ok is false when the attachment records no address
// write.
func dissemination(att *v1alpha1.NetworkAttachment, programmed, watchedSince time.Time, watched bool) (seconds float64, label string, ok bool) {
	written, ok := att.ExtendedMetadata.Writes.Time(v1alpha1.SectionAddress)
	if !ok {
		return 0, "", false
	}
	label = writtenBeforeWatched
	if watched && !written.Time.Before(watchedSince) {
		label = writtenWhileWatched
	}
	return max(programmed.Sub(written.Time).Seconds(), 0), label, true
}

// observeDissemination observes the dissemination latency of remote
// attachment att, whose flows the switch has held since programmed.
func (a *Agent) observeDissemination(att *v1alpha1.NetworkAttachment, programmed time.Time) {
	if att == nil {
		return
	}
	addr, ok := addressOf(att)
	if !ok {
		return
	}
	since, watched := a.state.watchedSince(network{att.Namespace, addr.vni})
	if seconds, label, ok := dissemination(att, programmed, since, watched); ok {
		a.metrics.dissemination.WithLabelValues(label).Observe(seconds)
	}
}

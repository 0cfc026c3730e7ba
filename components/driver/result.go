package driver

// This file turns the records of a run into its Result: latencies by
// name and their quantiles.

import "slices"

// result gathers the run's figures.
func (d *Driver) result() *Result {
	d.mu.Lock()
	defer d.mu.Unlock()
	res := &Result{RunID: d.cfg.RunID, Namespace: d.namespace, Latencies: map[string][]float64{}, Errors: map[string]int{}, Records: len(d.order)}
	for _, p := range d.phaseTimes {
		res.Phases = append(res.Phases, PhaseResult{Name: p.name, Duration: p.dur, Creates: d.creates[p.name], Deletes: d.deletes[p.name]})
	}
	for _, k := range errorKinds {
		res.Errors[k] = d.errCount[k]
	}
	for _, r := range d.order {
		if !r.hasErr(ErrCreate) {
			res.Latencies[LatencyCreate] = append(res.Latencies[LatencyCreate], r.createDur.Seconds())
		}
		for name, v := range map[string]float64{LatencyAddressed: r.addressed, LatencyReady: r.ready, LatencyTested: r.tested} {
			if v >= 0 {
				res.Latencies[name] = append(res.Latencies[name], v)
			}
		}
		if r.deleted && r.deleteDur > 0 {
			res.Latencies[LatencyDelete] = append(res.Latencies[LatencyDelete], r.deleteDur.Seconds())
		}
	}
	for _, v := range res.Latencies {
		slices.Sort(v)
	}
	return res
}

// Names of the latencies in Result and the summary, in the summary's order.
const (
	LatencyCreate    = "create"
	LatencyAddressed = "create→addressed"
	LatencyReady     = "create→ready"
	LatencyTested    = "create→tested"
	LatencyDelete    = "delete"
)

var latencyNames = []string{LatencyCreate, LatencyAddressed, LatencyReady, LatencyTested, LatencyDelete}

// quantile returns the q-quantile of sorted values (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

package apiserver

import (
	"net/http"
	"slices"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apiserver/pkg/endpoints/request"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// indexedWatchFields are the fields by which kos-apiserver's watch cache
// hands a resource's events to its watchers (registry.CachePerTrigger): a
// watch that requires an exact value of one gets only the events of
// objects with that value.
var indexedWatchFields = map[string][]string{
	"networkattachments": {v1alpha1.FieldNode, v1alpha1.FieldAddressVNI},
}

// indexedWatches is the server's priority and fairness, with the watches
// that the watch cache indexes left out of the count of the watches a
// write of their resource reaches.
//
// Priority and fairness charges a write, on top of its own seat, one seat
// per 10 watches of its resource for 5 ms each (capped at 10 seats, held
// longer): the cost of sending its event to every watcher. Kubernetes
// leaves out the watches its cache indexes (pods by spec.nodeName) but
// knows nothing of ours, so with 500 agents (1,750 watches of
// networkattachments, of which an event reaches about seven) every status
// write held 10 seats for about 90 ms, and the agents' and the controller
// manager's writes queued: 77 ms on average in BenchmarkAgents at 500
// agents, 100 attachments/s, create-to-ready p99 8.6 s. Requests of the
// admin (system:masters) are exempt from priority and fairness, which is
// why the benchmark's agents as admin never showed it.
type indexedWatches struct {
	utilflowcontrol.Interface
}

// RegisterWatch counts the watch r unless the watch cache indexes it.
func (f indexedWatches) RegisterWatch(r *http.Request) utilflowcontrol.ForgetWatchFunc {
	if indexedWatch(r) {
		return nil
	}
	return f.Interface.RegisterWatch(r)
}

// indexedWatch reports whether r is a watch of a KOS resource whose field
// selector requires an exact value of a field the watch cache indexes.
func indexedWatch(r *http.Request) bool {
	info, ok := request.RequestInfoFrom(r.Context())
	if !ok || info.Verb != "watch" || info.APIGroup != network.GroupName {
		return false
	}
	indexed := indexedWatchFields[info.Resource]
	if len(indexed) == 0 {
		return false
	}
	selector, err := fields.ParseSelector(r.URL.Query().Get("fieldSelector"))
	if err != nil {
		return false
	}
	return slices.ContainsFunc(indexed, func(field string) bool {
		_, ok := selector.RequiresExactMatch(field)
		return ok
	})
}

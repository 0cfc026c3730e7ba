// Package quota makes the ResourceQuota admission plugin of k8s.io/apiserver
// count KOS objects in kos-apiserver: object-count evaluators for Subnets,
// NetworkAttachments and IPLocks, whose quota names are
// count/<resource>.network.example.com, and the plugin initializer that hands
// them to the plugin.
//
// The main cluster's kube-apiserver never admits a KOS object (it proxies
// them to kos-apiserver), so its quota admission never sees one: kos-apiserver
// enforces quotas itself. It reads the ResourceQuotas of the main cluster;
// a create that would take a namespace over a quota's hard count is refused
// with the quota's message, and one that is admitted is charged to the
// quota's status.used.
//
// It does not recount. The resource quota controller of
// kube-controller-manager discovers the KOS resources through the aggregator
// (every 30 seconds), counts each namespace's objects with a generic
// object-count evaluator, one per object and no scopes, exactly as the
// evaluators here charge them, and writes status.used: when a quota is
// created, after every delete, and every --resource-quota-sync-period. Until
// it has counted a quota's KOS resources, creates in that namespace are
// refused ("status unknown for quota"), as for any custom resource.
package quota

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/admission/plugin/resourcequota"
	quotav1 "k8s.io/apiserver/pkg/quota/v1"
	"k8s.io/apiserver/pkg/quota/v1/generic"

	"github.com/kos-sdn/kos/components/apis/network"
)

// PluginName is the name of the ResourceQuota plugin in
// --enable-admission-plugins and --disable-admission-plugins.
const PluginName = resourcequota.PluginName

// Resources are the KOS resources whose objects quotas count.
var Resources = []schema.GroupResource{
	network.Resource("subnets"),
	network.Resource("networkattachments"),
	network.Resource("iplocks"),
}

// Register registers the ResourceQuota plugin in plugins. It reads its
// configuration, if any, from --admission-control-config-file, as
// kube-apiserver's does.
func Register(plugins *admission.Plugins) { resourcequota.Register(plugins) }

// Configuration returns the quota configuration of kos-apiserver: an
// object-count evaluator for each of Resources, and nothing ignored.
func Configuration() quotav1.Configuration {
	evaluators := make([]quotav1.Evaluator, 0, len(Resources))
	for _, gr := range Resources {
		evaluators = append(evaluators, generic.NewObjectCountEvaluator(gr, notListing(gr), ""))
	}
	return generic.NewConfiguration(evaluators, nil)
}

// notListing is the listing of an evaluator that admission never calls:
// only a quota controller lists objects to compute usage, and
// kube-controller-manager's does that with its own evaluators.
func notListing(gr schema.GroupResource) generic.ListFuncByNamespace {
	return func(namespace string) ([]runtime.Object, error) {
		return nil, fmt.Errorf("kos-apiserver does not compute the quota usage of %s in namespace %q; kube-controller-manager does", gr, namespace)
	}
}

// Initializer hands Configuration to the admission plugins that want a
// quota configuration.
type Initializer struct{}

var _ admission.PluginInitializer = Initializer{}

// Initialize gives plugin the quota configuration if it wants one.
func (Initializer) Initialize(plugin admission.Interface) {
	if wants, ok := plugin.(initializer.WantsQuotaConfiguration); ok {
		wants.SetQuotaConfiguration(Configuration())
	}
}

package subnetvalidator

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/apis/network/validation"
)

// Reasons of the Events the validator records on subnets.
const (
	// ReasonValidated is the reason of the Normal event of a validated subnet.
	ReasonValidated = "Validated"
	// ReasonConflict is the reason of the Warning event of a subnet that
	// conflicts with others.
	ReasonConflict = "Conflict"
)

// sync brings the status of the subnet named by ref up to date. A validated
// subnet stays validated; any other is compared with every subnet of its VNI
// that a live list from the server returns.
func (c *Controller) sync(ctx context.Context, ref cache.ObjectName) error {
	namespace, name := ref.Parts()
	key := ref.String()
	subnet, err := c.subnets.Subnets(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		// The subnets that failed because of this one may be valid now.
		for _, dependent := range c.conflicts.forget(key) {
			c.queue.Add(dependent)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading subnet %s from the cache: %w", key, err)
	}
	// A subnet deleted and created again under the same name may no longer
	// conflict with those that failed because of its predecessor.
	for _, dependent := range c.conflicts.staleDependents(key, subnet.UID) {
		c.queue.Add(dependent)
	}
	if subnet.Status.Validated {
		c.conflicts.record(key, nil)
		return nil
	}

	// A rival deleted between the live list below and the recording of the
	// conflicts finds nothing to re-check when its deletion is synced; the
	// watch tells record about it, so that this sync starts over.
	c.conflicts.watch(key)
	defer c.conflicts.unwatch(key)

	// The cache may lack a rival created a moment ago, which another copy of
	// this controller may be validating right now; only a live list sees
	// every subnet that exists when it runs.
	live, err := c.client.NetworkV1alpha1().Subnets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector(v1alpha1.FieldVNI, strconv.FormatUint(uint64(subnet.Spec.VNI), 10)).String(),
	})
	if err != nil {
		return fmt.Errorf("listing the subnets of VNI %d: %w", subnet.Spec.VNI, err)
	}
	var self *v1alpha1.Subnet
	for i := range live.Items {
		if s := &live.Items[i]; s.Namespace == namespace && s.Name == name {
			self = s
		}
	}
	if self == nil || self.UID != subnet.UID || self.Status.Validated {
		// Deleted, replaced or validated since the cache saw it: the
		// informer will bring the news and another sync.
		return nil
	}

	rivals, problems := Conflicts(self, live.Items)
	if gone := c.conflicts.record(key, rivals); len(gone) > 0 {
		// The list is out of date already: check again rather than write
		// conflicts that may no longer hold.
		klog.FromContext(ctx).V(4).Info("Rivals left during the check; checking again", "subnet", klog.KObj(self), "rivals", gone)
		c.queue.Add(key)
		return nil
	}
	want := v1alpha1.SubnetStatus{Validated: len(problems) == 0, Errors: problems}
	if apiequality.Semantic.DeepEqual(self.Status, want) {
		return nil
	}
	updated := self.DeepCopy()
	updated.Status = want
	// The update carries the resourceVersion of the listed subnet: it fails
	// when the subnet changed or was replaced since the list.
	result, err := c.client.NetworkV1alpha1().Subnets(namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating the status of subnet %s: %w", key, err)
	}
	logger := klog.FromContext(ctx)
	if want.Validated {
		logger.V(2).Info("Validated a subnet", "subnet", klog.KObj(result), "vni", result.Spec.VNI, "ipv4", result.Spec.IPv4)
		c.recorder.Eventf(result, corev1.EventTypeNormal, ReasonValidated, "Subnet %s on VNI %d conflicts with no other subnet", result.Spec.IPv4, result.Spec.VNI)
		c.observeLatency(result)
	} else {
		logger.V(2).Info("Subnet conflicts with others", "subnet", klog.KObj(result), "errors", problems)
		c.recorder.Event(result, corev1.EventTypeWarning, ReasonConflict, strings.Join(problems, "; "))
	}
	return nil
}

// observeLatency records the time from the subnet's creation to its
// validation, as the server stamped them.
func (c *Controller) observeLatency(s *v1alpha1.Subnet) {
	if c.latency == nil {
		return
	}
	created, ok1 := s.ExtendedMetadata.Writes.Time(v1alpha1.SectionSpec)
	validated, ok2 := s.ExtendedMetadata.Writes.Time(v1alpha1.SectionStatus)
	if ok1 && ok2 {
		c.latency.Observe(validated.Sub(created.Time).Seconds())
	}
}

// Conflicts compares subnet with others, subnets of any VNI, by the rule of
// validation.SubnetConflict, and returns the rivals it conflicts with (by
// namespace/name key, with their UIDs) and the problems, sorted, in the words
// status.errors uses.
func Conflicts(subnet *v1alpha1.Subnet, others []v1alpha1.Subnet) (map[string]types.UID, []string) {
	rivals := map[string]types.UID{}
	var problems []string
	self := validation.SubnetPlacement{Namespace: subnet.Namespace, Name: subnet.Name, VNI: subnet.Spec.VNI, IPv4: subnet.Spec.IPv4}
	for i := range others {
		o := &others[i]
		if err := validation.SubnetConflict(self, validation.SubnetPlacement{Namespace: o.Namespace, Name: o.Name, VNI: o.Spec.VNI, IPv4: o.Spec.IPv4}); err != nil {
			rivals[o.Namespace+"/"+o.Name] = o.UID
			problems = append(problems, err.Detail)
		}
	}
	slices.Sort(problems)
	return rivals, problems
}

// conflictsCache associates each subnet with the subnets whose validation
// failed because of it, so that its deletion (or replacement) re-checks them.
// It is safe for concurrent use.
type conflictsCache struct {
	mu sync.Mutex
	// dependents maps a rival's key to the subnets that failed because of
	// it, each with the UID the rival had then.
	dependents map[string]map[string]types.UID
	// rivals maps a failed subnet's key to the keys of its rivals: the
	// inverse of dependents.
	rivals map[string][]string
	// watches maps the key of each subnet being checked (between watch
	// and unwatch) to the subnets deleted or replaced since its check
	// began, each with the UID that replaced it ("" when deleted).
	watches map[string]map[string]types.UID
}

func newConflictsCache() *conflictsCache {
	return &conflictsCache{
		dependents: map[string]map[string]types.UID{},
		rivals:     map[string][]string{},
		watches:    map[string]map[string]types.UID{},
	}
}

// watch starts remembering, for the check of dependent, which subnets are
// deleted or replaced, until unwatch. record reports those among the rivals
// it records: their deletion came too early to re-check dependent.
func (cc *conflictsCache) watch(dependent string) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.watches[dependent] = map[string]types.UID{}
}

// unwatch ends what watch started.
func (cc *conflictsCache) unwatch(dependent string) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	delete(cc.watches, dependent)
}

// record replaces what the cache knows of the rivals of dependent. It
// returns, sorted, the rivals that were deleted or replaced by a subnet of
// another UID since watch(dependent): dependent must be checked again.
func (cc *conflictsCache) record(dependent string, rivals map[string]types.UID) []string {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.dropDependent(dependent)
	var gone []string
	for rival, uid := range rivals {
		if cc.dependents[rival] == nil {
			cc.dependents[rival] = map[string]types.UID{}
		}
		cc.dependents[rival][dependent] = uid
		cc.rivals[dependent] = append(cc.rivals[dependent], rival)
		if now, changed := cc.watches[dependent][rival]; changed && now != uid {
			gone = append(gone, rival)
		}
	}
	slices.Sort(gone)
	return gone
}

// forget removes a deleted subnet and returns the subnets that failed
// because of it.
func (cc *conflictsCache) forget(key string) []string {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.changed(key, "")
	cc.dropDependent(key)
	var out []string
	for dependent := range cc.dependents[key] {
		out = append(out, dependent)
	}
	delete(cc.dependents, key)
	slices.Sort(out)
	return out
}

// staleDependents returns, and forgets, the subnets that failed because of
// an earlier subnet of that key, one whose UID was not uid.
func (cc *conflictsCache) staleDependents(key string, uid types.UID) []string {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.changed(key, uid)
	var out []string
	for dependent, seen := range cc.dependents[key] {
		if seen != uid {
			out = append(out, dependent)
			delete(cc.dependents[key], dependent)
		}
	}
	if len(cc.dependents[key]) == 0 {
		delete(cc.dependents, key)
	}
	slices.Sort(out)
	return out
}

// changed tells every check under way that the subnet of key now has uid
// ("" when deleted). The caller holds mu.
func (cc *conflictsCache) changed(key string, uid types.UID) {
	for _, seen := range cc.watches {
		seen[key] = uid
	}
}

// dropDependent removes dependent from the dependents of each of its
// rivals. The caller holds mu.
func (cc *conflictsCache) dropDependent(dependent string) {
	for _, rival := range cc.rivals[dependent] {
		delete(cc.dependents[rival], dependent)
		if len(cc.dependents[rival]) == 0 {
			delete(cc.dependents, rival)
		}
	}
	delete(cc.rivals, dependent)
}

package ipam

// This file takes addresses away: an attachment whose subnet gives none
// keeps its address or says why it has none, and the locks no attachment
// should hold any more are released.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// noSubnet handles an attachment whose subnet gives no address, for the
// reason problem: one without an address says so in its status, one with
// keeps it.
func (c *Controller) noSubnet(ctx context.Context, att *v1alpha1.NetworkAttachment, owned []*v1alpha1.IPLock, problem string) error {
	if att.Status.IPv4 == "" {
		return c.unassign(ctx, att, owned, problem)
	}
	return c.keepAddress(ctx, att, owned, problem)
}

// keepAddress keeps the address of an attachment that its subnet no longer
// gives, for the reason problem: a pod may be using the address, and
// clearing it would take the pod's interface away for good (kos-apiserver
// refuses to delete a subnet that attachments use, but a subnet made
// again, or deleted in a race with a new attachment, still gets here). The
// status keeps the address, its VNI and lock, and says problem in
// errors.ipam; the lock the status names stays, and the attachment's other
// locks go. The address goes when the attachment does.
func (c *Controller) keepAddress(ctx context.Context, att *v1alpha1.NetworkAttachment, owned []*v1alpha1.IPLock, problem string) error {
	c.inflight.forget(att.Namespace + "/" + att.Name)
	if !slices.Equal(att.Status.Errors.IPAM, []string{problem}) || att.Status.AddressContention {
		updated := att.ForStatusWrite()
		updated.Status.Errors.IPAM = []string{problem}
		updated.Status.AddressContention = false
		result, err := c.client.NetworkV1alpha1().NetworkAttachments(att.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
		if err != nil {
			return fmt.Errorf("writing the status of attachment %s/%s: %w", att.Namespace, att.Name, err)
		}
		klog.FromContext(ctx).V(2).Info("Kept an address its subnet no longer gives", "attachment", klog.KObj(result), "ipv4", result.Status.IPv4, "vni", result.Status.AddressVNI, "problem", problem)
		c.recorder.Eventf(result, corev1.EventTypeWarning, ReasonAddressKept, "Kept address %s on VNI %d until the attachment is deleted: %s", result.Status.IPv4, result.Status.AddressVNI, problem)
	}
	named := ""
	if addr, err := netip.ParseAddr(att.Status.IPv4); err == nil && addr.Is4() {
		named = LockName(att.Status.AddressVNI, addr)
	}
	var stale []*v1alpha1.IPLock
	for _, l := range owned {
		if l.Name != named {
			stale = append(stale, l)
		}
	}
	return c.release(ctx, att, stale)
}

// unassign clears the attachment's address, reporting problem, and then
// releases the locks it holds. The status goes first: a lock must not be
// freed while a status still names its address.
func (c *Controller) unassign(ctx context.Context, att *v1alpha1.NetworkAttachment, owned []*v1alpha1.IPLock, problem string) error {
	if err := c.writeNoAddress(ctx, att, problem, false); err != nil {
		return err
	}
	c.inflight.forget(att.Namespace + "/" + att.Name)
	return c.release(ctx, att, owned)
}

// writeNoAddress writes a status without an address and with problem as
// the IPAM error, unless the status says so already.
func (c *Controller) writeNoAddress(ctx context.Context, att *v1alpha1.NetworkAttachment, problem string, contention bool) error {
	want := att.Status.DeepCopy()
	want.IPv4, want.AddressVNI, want.LockUID, want.SubnetCreationTime = "", 0, "", nil
	want.AddressContention = contention
	want.Errors.IPAM = []string{problem}
	if apiequality.Semantic.DeepEqual(&att.Status, want) {
		return nil
	}
	updated := att.ForStatusWrite()
	updated.Status = *want
	result, err := c.client.NetworkV1alpha1().NetworkAttachments(att.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("writing the status of attachment %s/%s: %w", att.Namespace, att.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Attachment has no address", "attachment", klog.KObj(result), "problem", problem)
	c.recorder.Event(result, corev1.EventTypeWarning, ReasonNoAddress, problem)
	return nil
}

// release deletes locks, each only while it has the UID seen: a lock of the
// same name created since belongs to someone else.
func (c *Controller) release(ctx context.Context, att *v1alpha1.NetworkAttachment, locks []*v1alpha1.IPLock) error {
	var errs []error
	for _, l := range locks {
		if err := c.deleteLock(ctx, l.Namespace, l.Name, l.UID); err != nil {
			errs = append(errs, err)
			continue
		}
		klog.FromContext(ctx).V(2).Info("Released an IP lock", "attachment", klog.KObj(att), "lock", l.Name)
	}
	return errors.Join(errs...)
}

func (c *Controller) deleteLock(ctx context.Context, namespace, name string, uid types.UID) error {
	err := c.client.NetworkV1alpha1().IPLocks(namespace).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// Gone already, or replaced by a lock that is not ours to free.
		return nil
	}
	return fmt.Errorf("releasing IP lock %s/%s: %w", namespace, name, err)
}

// releaseOrphans deletes the cached locks controlled by an attachment of
// that name whose UID is not keep: a deleted attachment, or an earlier one
// of the same name. There may be no garbage collector to do it. Since the
// cache of attachments can trail the cache of locks, each owner is first
// confirmed gone with a live read.
func (c *Controller) releaseOrphans(ctx context.Context, namespace, name string, keep types.UID) error {
	objs, err := c.lockIndex.ByIndex(locksByOwnerIndex, namespace+"/"+name)
	if err != nil {
		return fmt.Errorf("looking up the IP locks of %s/%s: %w", namespace, name, err)
	}
	var orphans []*v1alpha1.IPLock
	for _, o := range objs {
		if l := o.(*v1alpha1.IPLock); ownerRef(l).UID != keep {
			orphans = append(orphans, l)
		}
	}
	if len(orphans) == 0 {
		return nil
	}
	live, err := c.client.NetworkV1alpha1().NetworkAttachments(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading attachment %s/%s: %w", namespace, name, err)
	}
	var errs []error
	for _, l := range orphans {
		if err == nil && live.UID == ownerRef(l).UID {
			// The owner exists; this cache has not seen it yet.
			continue
		}
		if err := c.deleteLock(ctx, namespace, l.Name, l.UID); err != nil {
			errs = append(errs, err)
			continue
		}
		klog.FromContext(ctx).V(2).Info("Released the IP lock of a deleted attachment", "lock", klog.KObj(l), "owner", ownerRef(l).UID)
	}
	return errors.Join(errs...)
}

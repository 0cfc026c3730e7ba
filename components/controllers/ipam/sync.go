package ipam

// This file holds sync, the one place that decides an attachment's
// address, and assign, which gives it one of its subnet and writes it.

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// The errors.ipam messages of an attachment without an address; besides
// these, an attachment that asks for an address (spec.ipv4) may be told
// "Requested address A is outside subnet S (...)" or "Requested address A is
// taken by NetworkAttachment N/M".
const (
	// ErrSubnetFull says every assignable address of the subnet is locked.
	ErrSubnetFull = "Referenced subnet has run out of IPs"
	// ErrSubnetMissing says the subnet the attachment names does not exist.
	ErrSubnetMissing = "Referenced subnet does not exist"
	// ErrSubnetNotValidated says the subnet was not validated (yet).
	ErrSubnetNotValidated = v1alpha1.IPAMErrorSubnetNotValidated
)

// Reasons of the Events the controller records on attachments.
const (
	// ReasonAddressAssigned is the reason of the Normal event of an
	// attachment that got an address.
	ReasonAddressAssigned = "AddressAssigned"
	// ReasonNoAddress is the reason of the Warning event of an attachment
	// that cannot get an address; the message says why.
	ReasonNoAddress = "NoAddress"
	// ReasonAddressKept is the reason of the Warning event of an attachment
	// that keeps its address although its subnet no longer gives it (the
	// subnet is gone, not validated, or another of the same name); the
	// message says why.
	ReasonAddressKept = "AddressKept"
)

// sync brings the address of the attachment named by ref up to date: it
// keeps a valid address, gets one for an attachment without, and releases
// the locks the attachment no longer uses, or those of a deleted attachment.
// An attachment never loses its address to a change of its subnet: when the
// subnet is gone, not validated or another one of the same name, the
// attachment keeps the address and its lock until it is deleted (a pod may
// be using it), and its status says what is wrong (keepAddress).
func (c *Controller) sync(ctx context.Context, ref cache.ObjectName) error {
	namespace, name := ref.Parts()
	key := ref.String()
	att, err := c.attachments.NetworkAttachments(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		c.inflight.forget(key)
		return c.releaseOrphans(ctx, namespace, name, "")
	}
	if err != nil {
		return fmt.Errorf("reading attachment %s from the cache: %w", key, err)
	}
	// Locks of an earlier attachment of the same name.
	if err := c.releaseOrphans(ctx, namespace, name, att.UID); err != nil {
		return err
	}
	subnet, err := c.subnets.Subnets(namespace).Get(att.Spec.Subnet)
	if apierrors.IsNotFound(err) {
		subnet = nil
	} else if err != nil {
		return fmt.Errorf("reading subnet %s/%s from the cache: %w", namespace, att.Spec.Subnet, err)
	}

	rec := c.inflight.get(key)
	if rec != nil && (subnet == nil || subnet.UID != rec.subnetUID || rec.attUID != att.UID) {
		c.inflight.forget(key)
		rec = nil
	}
	if rec != nil && rec.writtenRV != "" && att.ResourceVersion == rec.seenRV {
		// The address is written; the cache has not caught up yet, and
		// writing again would only conflict.
		return nil
	}

	owned, err := c.ownedLocks(namespace, name, att.UID)
	if err != nil {
		return err
	}
	switch {
	case subnet == nil:
		return c.noSubnet(ctx, att, owned, ErrSubnetMissing)
	case !subnet.Status.Validated:
		return c.noSubnet(ctx, att, owned, ErrSubnetNotValidated)
	}
	block, err := netip.ParsePrefix(subnet.Spec.IPv4)
	if err != nil {
		return c.noSubnet(ctx, att, owned, fmt.Sprintf("Referenced subnet has a malformed CIDR block %q", subnet.Spec.IPv4))
	}
	r, err := assignableRange(block)
	if err != nil {
		return c.noSubnet(ctx, att, owned, fmt.Sprintf("Referenced subnet has a malformed CIDR block %q", subnet.Spec.IPv4))
	}
	if _, keep := statusAddress(att, subnet, r); att.Status.IPv4 != "" && !keep {
		// The subnet was made again with another block or VNI.
		return c.keepAddress(ctx, att, owned, fmt.Sprintf("Address %s on VNI %d is not one of subnet %s (%s on VNI %d)",
			att.Status.IPv4, att.Status.AddressVNI, subnet.Name, subnet.Spec.IPv4, subnet.Spec.VNI))
	}

	current, err := c.currentLock(ctx, att, subnet, r, rec)
	if err != nil {
		return err
	}
	if current != "" {
		if rec != nil && rec.lockName == current && c.cached(namespace, current, rec.lockUID) {
			// The cache vouches for the lock now.
			c.inflight.forget(key)
		}
		var surplus []*v1alpha1.IPLock
		for _, l := range owned {
			if l.Name != current {
				surplus = append(surplus, l)
			}
		}
		if rec != nil && rec.lockName != current {
			// A lock this controller took, superseded by another's write.
			surplus = append(surplus, &v1alpha1.IPLock{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: rec.lockName, UID: rec.lockUID}})
			c.inflight.forget(key)
		}
		return c.release(ctx, att, surplus)
	}
	return c.assign(ctx, att, subnet, r, owned, rec)
}

// assign gives the attachment an address of subnet. An address never
// changes into another in one write: the address the status names stays
// while it is one of subnet (when its lock went, the same address is locked
// again; sync keeps an address that is not one of subnet's). An attachment
// without an address gets the one spec.ipv4 asks
// for, else a lock it already holds there (taken by a sync whose status
// write failed), else a new lock on a random free address. What keeps it
// from an address (a full subnet, a requested address outside the subnet or
// held by another attachment) is reported in the status.
func (c *Controller) assign(ctx context.Context, att *v1alpha1.NetworkAttachment, subnet *v1alpha1.Subnet, r addrRange, owned []*v1alpha1.IPLock, rec *inflight) error {
	kept, keep := statusAddress(att, subnet, r)
	// want is the one address the attachment may get, if there is one.
	var want netip.Addr
	switch {
	case keep:
		want = kept
	case att.Spec.IPv4 != "":
		a, err := netip.ParseAddr(att.Spec.IPv4)
		if err != nil || !a.Is4() || !r.contains(addrToUint32(a)) {
			return c.writeNoAddress(ctx, att, fmt.Sprintf("Requested address %s is outside subnet %s (%s), whose assignable addresses are %s-%s",
				att.Spec.IPv4, subnet.Name, subnet.Spec.IPv4, uint32ToAddr(r.first), uint32ToAddr(r.last)), false)
		}
		want = a
	}
	wantName := ""
	if want.IsValid() {
		wantName = LockName(subnet.Spec.VNI, want)
	}

	// Locks that fit no longer, such as those of a deleted subnet, go now,
	// and so do those of other addresses than the one wanted; except the
	// one the status still names: it goes once the status moved on.
	named := ""
	if addr, err := netip.ParseAddr(att.Status.IPv4); err == nil && addr.Is4() {
		named = LockName(att.Status.AddressVNI, addr)
	}
	var stale []*v1alpha1.IPLock
	for _, l := range owned {
		if l.Name != named && (!c.lockFits(l, att, subnet, r) || wantName != "" && l.Name != wantName) {
			stale = append(stale, l)
		}
	}
	if err := c.release(ctx, att, stale); err != nil {
		return err
	}

	var lock *v1alpha1.IPLock
	if want.IsValid() {
		mine, holder, err := c.lockAddress(ctx, att, subnet, r, owned, rec, want)
		if err != nil {
			return err
		}
		switch {
		case mine != nil:
			lock = mine
		case att.Spec.IPv4 != "":
			// Asked for (and maybe held, until its lock went): the
			// attachment waits without an address until the holder is
			// gone, when the deletion of its lock brings the attachment
			// back.
			problem := fmt.Sprintf("Requested address %s is taken by %s", want, describeHolder(holder))
			if err := c.writeNoAddress(ctx, att, problem, false); err != nil {
				return err
			}
			if !c.cached(holder.Namespace, holder.Name, holder.UID) {
				// No deletion is heard of a lock the cache never held.
				return fmt.Errorf("requested address %s of attachment %s/%s is held by IP lock %s, which the cache lacks", want, att.Namespace, att.Name, holder.Name)
			}
			return nil
		default:
			// The address held went to another when its lock went: the
			// attachment loses it and takes another.
			var err error
			if att, err = c.clearAddress(ctx, att, "its lock went to "+describeHolder(holder)); err != nil {
				return err
			}
		}
	}
	if lock == nil {
		var err error
		lock, err = c.adoptable(ctx, att, subnet, r, owned, rec)
		if err != nil {
			return err
		}
	}
	if lock == nil {
		var err error
		lock, err = c.lockFreeAddress(ctx, att, subnet, r)
		if err != nil {
			return err
		}
		if lock == nil {
			return c.writeNoAddress(ctx, att, ErrSubnetFull, true)
		}
	}
	key := att.Namespace + "/" + att.Name
	c.inflight.put(key, &inflight{attUID: att.UID, subnetUID: subnet.UID, lockName: lock.Name, lockUID: lock.UID, seenRV: att.ResourceVersion})

	_, addr, _ := ParseLockName(lock.Name)
	updated := att.ForStatusWrite()
	updated.Status.IPv4 = addr.String()
	updated.Status.AddressVNI = subnet.Spec.VNI
	updated.Status.LockUID = string(lock.UID)
	created := subnet.CreationTimestamp
	updated.Status.SubnetCreationTime = &created
	updated.Status.AddressContention = false
	updated.Status.Errors.IPAM = nil
	// The write carries the resourceVersion the decision was based on: it
	// fails when another writer, such as another copy of this controller,
	// changed the attachment meanwhile.
	result, err := c.client.NetworkV1alpha1().NetworkAttachments(att.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		// The record keeps the lock for the next try.
		return fmt.Errorf("writing the address of attachment %s: %w", key, err)
	}
	c.inflight.written(key, result.ResourceVersion)
	klog.FromContext(ctx).V(2).Info("Assigned an address", "attachment", klog.KObj(result), "ipv4", result.Status.IPv4, "vni", result.Status.AddressVNI, "lock", lock.Name)
	if c.addressEvents {
		c.recorder.Eventf(result, corev1.EventTypeNormal, ReasonAddressAssigned, "Assigned %s on VNI %d", result.Status.IPv4, result.Status.AddressVNI)
	}
	c.observeLatency(result)
	return nil
}

// statusAddress returns the address the attachment's status names and
// whether the attachment may keep it in subnet: an IPv4 address on the
// subnet's VNI, in its assignable range r, and the one spec.ipv4 asks for,
// if it asks. The subnet's creation time does not matter: a subnet deleted
// and made again with the same VNI and block keeps its addresses.
func statusAddress(att *v1alpha1.NetworkAttachment, subnet *v1alpha1.Subnet, r addrRange) (netip.Addr, bool) {
	st := att.Status
	addr, err := netip.ParseAddr(st.IPv4)
	if err != nil || !addr.Is4() || st.AddressVNI != subnet.Spec.VNI || !r.contains(addrToUint32(addr)) {
		return netip.Addr{}, false
	}
	if att.Spec.IPv4 != "" && att.Spec.IPv4 != st.IPv4 {
		return netip.Addr{}, false
	}
	return addr, true
}

// clearAddress writes the attachment's status without an address (and
// without problems: a new address comes in the same sync) and returns the
// attachment written.
func (c *Controller) clearAddress(ctx context.Context, att *v1alpha1.NetworkAttachment, why string) (*v1alpha1.NetworkAttachment, error) {
	updated := att.ForStatusWrite()
	st := &updated.Status
	st.IPv4, st.AddressVNI, st.LockUID, st.SubnetCreationTime = "", 0, "", nil
	st.AddressContention = false
	st.Errors.IPAM = nil
	result, err := c.client.NetworkV1alpha1().NetworkAttachments(att.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("clearing the address of attachment %s/%s: %w", att.Namespace, att.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Cleared an address", "attachment", klog.KObj(result), "ipv4", att.Status.IPv4, "vni", att.Status.AddressVNI, "reason", why)
	return result, nil
}

// observeLatency records the time from the attachment's creation to the
// write of its address, as the server stamped them.
func (c *Controller) observeLatency(att *v1alpha1.NetworkAttachment) {
	if c.latency == nil {
		return
	}
	created, ok1 := att.ExtendedMetadata.Writes.Time(v1alpha1.SectionSpec)
	addressed, ok2 := att.ExtendedMetadata.Writes.Time(v1alpha1.SectionAddress)
	if ok1 && ok2 {
		c.latency.Observe(addressed.Sub(created.Time).Seconds())
	}
}

package ipam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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

// createAttempts bounds how many addresses one sync tries to lock when the
// cache thinks them free but the server finds them taken.
const createAttempts = 8

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

// currentLock returns the name of the lock that the attachment's status
// names, when it is a valid address of subnet: on the subnet's VNI, in its
// assignable range, from this very subnet (by creation time), and held by a
// lock that exists, with the UID the status says, controlled by this
// attachment. Else it returns "". A lock the cache lacks is vouched for by
// the record of this controller's own write, or read live from the server:
// the cache of locks can trail the cache of attachments.
func (c *Controller) currentLock(ctx context.Context, att *v1alpha1.NetworkAttachment, subnet *v1alpha1.Subnet, r addrRange, rec *inflight) (string, error) {
	st := att.Status
	if st.IPv4 == "" || st.LockUID == "" || st.AddressVNI != subnet.Spec.VNI || st.SubnetCreationTime == nil || !st.SubnetCreationTime.Equal(&subnet.CreationTimestamp) {
		return "", nil
	}
	addr, err := netip.ParseAddr(st.IPv4)
	if err != nil || !addr.Is4() || !r.contains(addrToUint32(addr)) {
		return "", nil
	}
	name := LockName(st.AddressVNI, addr)
	uid := types.UID(st.LockUID)
	if l, err := c.locks.IPLocks(att.Namespace).Get(name); err == nil && l.UID == uid {
		return validLock(l, att, subnet, name), nil
	}
	if rec != nil && rec.lockName == name && rec.lockUID == uid {
		return name, nil
	}
	l, err := c.client.NetworkV1alpha1().IPLocks(att.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading IP lock %s/%s: %w", att.Namespace, name, err)
	}
	if l.UID != uid {
		return "", nil
	}
	return validLock(l, att, subnet, name), nil
}

// validLock returns name when lock l is controlled by att and was taken in
// subnet, else "".
func validLock(l *v1alpha1.IPLock, att *v1alpha1.NetworkAttachment, subnet *v1alpha1.Subnet, name string) string {
	if ref := ownerRef(l); ref == nil || ref.UID != att.UID || l.Spec.SubnetName != subnet.Name {
		return ""
	}
	return name
}

// cached reports whether the lock cache holds the lock of that name and UID.
func (c *Controller) cached(namespace, name string, uid types.UID) bool {
	l, err := c.locks.IPLocks(namespace).Get(name)
	return err == nil && l.UID == uid
}

// ownedLocks returns the cached locks controlled by the attachment with that
// UID, sorted by name.
func (c *Controller) ownedLocks(namespace, name string, uid types.UID) ([]*v1alpha1.IPLock, error) {
	objs, err := c.lockIndex.ByIndex(locksByOwnerIndex, namespace+"/"+name)
	if err != nil {
		return nil, fmt.Errorf("looking up the IP locks of %s/%s: %w", namespace, name, err)
	}
	var out []*v1alpha1.IPLock
	for _, o := range objs {
		if l := o.(*v1alpha1.IPLock); ownerRef(l).UID == uid {
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b *v1alpha1.IPLock) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
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

// lockAddress returns a lock of the attachment on addr, an address of
// subnet: one it holds already (in the cache, or recorded by this
// controller's last try and read live), else one it creates. When another
// holds the address it returns that lock as holder instead; a lock whose
// attachment is gone (deleted, or an earlier attachment of the same name,
// such as a StatefulSet's pod made again) is released and the address
// taken.
func (c *Controller) lockAddress(ctx context.Context, att *v1alpha1.NetworkAttachment, subnet *v1alpha1.Subnet, r addrRange, owned []*v1alpha1.IPLock, rec *inflight, addr netip.Addr) (mine, holder *v1alpha1.IPLock, err error) {
	name := LockName(subnet.Spec.VNI, addr)
	for _, l := range owned {
		if l.Name == name && c.lockFits(l, att, subnet, r) {
			return l, nil, nil
		}
	}
	if rec != nil && rec.lockName == name {
		l, err := c.client.NetworkV1alpha1().IPLocks(att.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("reading IP lock %s/%s: %w", att.Namespace, name, err)
		}
		if err == nil && l.UID == rec.lockUID && c.lockFits(l, att, subnet, r) {
			return l, nil, nil
		}
	}
	for range createAttempts {
		created, err := c.client.NetworkV1alpha1().IPLocks(att.Namespace).Create(ctx, newLock(att, subnet, name), metav1.CreateOptions{})
		if err == nil {
			return created, nil, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, nil, fmt.Errorf("locking %s on VNI %d: %w", addr, subnet.Spec.VNI, err)
		}
		l, err := c.client.NetworkV1alpha1().IPLocks(att.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, nil, fmt.Errorf("reading IP lock %s/%s: %w", att.Namespace, name, err)
		}
		if c.lockFits(l, att, subnet, r) {
			return l, nil, nil // the attachment's own; the cache trails
		}
		gone, err := c.ownerGone(ctx, att, l)
		if err != nil {
			return nil, nil, err
		}
		if !gone {
			return nil, l, nil
		}
		if err := c.deleteLock(ctx, l.Namespace, l.Name, l.UID); err != nil {
			return nil, nil, err
		}
		klog.FromContext(ctx).V(2).Info("Released the IP lock of a deleted attachment for the address asked for", "attachment", klog.KObj(att), "lock", klog.KObj(l), "owner", ownerRef(l).UID)
	}
	return nil, nil, fmt.Errorf("locking %s on VNI %d: released by its holder and taken again %d times", addr, subnet.Spec.VNI, createAttempts)
}

// ownerGone reports whether the attachment that controls lock l is gone,
// read live: deleted, or replaced by another of the same name. A lock
// controlled by att itself that does not fit (such as one of another
// subnet) counts as gone too. A lock without a controlling attachment is
// not this controller's to release.
func (c *Controller) ownerGone(ctx context.Context, att *v1alpha1.NetworkAttachment, l *v1alpha1.IPLock) (bool, error) {
	ref := ownerRef(l)
	switch {
	case ref == nil:
		return false, nil
	case ref.UID == att.UID:
		return true, nil
	}
	live, err := c.client.NetworkV1alpha1().NetworkAttachments(l.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading attachment %s/%s: %w", l.Namespace, ref.Name, err)
	}
	return live.UID != ref.UID, nil
}

// describeHolder names what holds an address, for a user: the attachment
// that controls its lock, else the lock.
func describeHolder(l *v1alpha1.IPLock) string {
	if ref := ownerRef(l); ref != nil {
		return fmt.Sprintf("NetworkAttachment %s/%s", l.Namespace, ref.Name)
	}
	return fmt.Sprintf("IPLock %s/%s", l.Namespace, l.Name)
}

// adoptable returns a lock the attachment already holds on a valid address
// of subnet, or nil. The lock recorded by this controller's last try is
// checked live, since the cache may not hold it yet and a rival may have
// released it.
func (c *Controller) adoptable(ctx context.Context, att *v1alpha1.NetworkAttachment, subnet *v1alpha1.Subnet, r addrRange, owned []*v1alpha1.IPLock, rec *inflight) (*v1alpha1.IPLock, error) {
	for _, l := range owned {
		if c.lockFits(l, att, subnet, r) {
			return l, nil
		}
	}
	if rec == nil {
		return nil, nil
	}
	l, err := c.client.NetworkV1alpha1().IPLocks(att.Namespace).Get(ctx, rec.lockName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		c.inflight.forget(att.Namespace + "/" + att.Name)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading IP lock %s/%s: %w", att.Namespace, rec.lockName, err)
	}
	if l.UID == rec.lockUID && c.lockFits(l, att, subnet, r) {
		return l, nil
	}
	return nil, nil
}

// lockFits reports whether lock l, controlled by att, holds an address that
// att may use in subnet.
func (c *Controller) lockFits(l *v1alpha1.IPLock, att *v1alpha1.NetworkAttachment, subnet *v1alpha1.Subnet, r addrRange) bool {
	vni, addr, err := ParseLockName(l.Name)
	if err != nil || vni != subnet.Spec.VNI || !r.contains(addrToUint32(addr)) {
		return false
	}
	return validLock(l, att, subnet, l.Name) != ""
}

// lockFreeAddress creates a lock on a random address of r that the cache
// holds no lock for, trying others when the server says one is taken. It
// returns nil when the subnet is full.
func (c *Controller) lockFreeAddress(ctx context.Context, att *v1alpha1.NetworkAttachment, subnet *v1alpha1.Subnet, r addrRange) (*v1alpha1.IPLock, error) {
	vni := subnet.Spec.VNI
	// Addresses the server found taken although the cache lacks their lock.
	serverTaken := map[uint32]bool{}
	for range createAttempts {
		a, ok, err := c.pickUnlocked(vni, r, serverTaken)
		if err != nil || !ok {
			return nil, err
		}
		addr := uint32ToAddr(a)
		created, err := c.client.NetworkV1alpha1().IPLocks(att.Namespace).Create(ctx, newLock(att, subnet, LockName(vni, addr)), metav1.CreateOptions{})
		if err == nil {
			return created, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("locking %s on VNI %d: %w", addr, vni, err)
		}
		// The cache trails the server: someone holds this one.
		serverTaken[a] = true
	}
	return nil, fmt.Errorf("the cache of VNI %d trails the server: %d addresses it thought free were taken", vni, createAttempts)
}

// pickUnlocked returns a random address of r on vni that no cached lock
// holds and that is not in also, or false when there is none. Random
// probes cost one index lookup each, whatever the number of locks; only
// when they all miss, as in a range more than half taken, are the VNI's
// locks listed and counted.
func (c *Controller) pickUnlocked(vni uint32, r addrRange, also map[uint32]bool) (uint32, bool, error) {
	locked := func(a uint32) bool {
		if also[a] {
			return true
		}
		objs, err := c.lockIndex.ByIndex(locksByAddressIndex, LockName(vni, uint32ToAddr(a)))
		return err != nil || len(objs) > 0
	}
	for range probes {
		a := r.first + uint32(c.intN(r.size()))
		if !locked(a) {
			return a, true, nil
		}
	}
	objs, err := c.lockIndex.ByIndex(locksByVNIIndex, fmt.Sprint(vni))
	if err != nil {
		return 0, false, fmt.Errorf("looking up the IP locks of VNI %d: %w", vni, err)
	}
	taken := map[uint32]bool{}
	for a := range also {
		taken[a] = true
	}
	for _, o := range objs {
		if _, addr, err := ParseLockName(o.(*v1alpha1.IPLock).Name); err == nil && r.contains(addrToUint32(addr)) {
			taken[addrToUint32(addr)] = true
		}
	}
	a, ok := pickFree(r, uint64(len(taken)), func(a uint32) bool { return taken[a] }, c.intN)
	return a, ok, nil
}

// newLock returns the lock named name that holds its address of subnet for
// att, its controller.
func newLock(att *v1alpha1.NetworkAttachment, subnet *v1alpha1.Subnet, name string) *v1alpha1.IPLock {
	return &v1alpha1.IPLock{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: att.Namespace,
			Name:      name,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.SchemeGroupVersion.String(),
				Kind:       "NetworkAttachment",
				Name:       att.Name,
				UID:        att.UID,
				Controller: ptrTo(true),
			}},
		},
		Spec: v1alpha1.IPLockSpec{SubnetName: subnet.Name},
	}
}

func ptrTo[T any](v T) *T { return &v }

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

// inflight records an address this controller locked for an attachment, so
// that it neither takes a second one nor writes the first again while its
// caches catch up with its own writes.
type inflight struct {
	// attUID and subnetUID identify the attachment and the subnet the lock
	// was taken for; the record is void for any other.
	attUID, subnetUID types.UID
	// lockName and lockUID identify the lock created.
	lockName string
	lockUID  types.UID
	// seenRV is the attachment's resourceVersion the decision was based on;
	// writtenRV the one the write of the address produced, "" until it
	// succeeded.
	seenRV, writtenRV string
}

// inflightRecords holds the records by attachment key; it is safe for
// concurrent use.
type inflightRecords struct {
	mu      sync.Mutex
	records map[string]*inflight
}

func newInflightRecords() *inflightRecords {
	return &inflightRecords{records: map[string]*inflight{}}
}

// get returns a copy of the record of key, or nil.
func (r *inflightRecords) get(key string) *inflight {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec, ok := r.records[key]; ok {
		cp := *rec
		return &cp
	}
	return nil
}

func (r *inflightRecords) put(key string, rec *inflight) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records[key] = rec
}

// written notes that the address of key's record was written, producing
// resourceVersion rv.
func (r *inflightRecords) written(key, rv string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec, ok := r.records[key]; ok {
		rec.writtenRV = rv
	}
}

func (r *inflightRecords) forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.records, key)
}

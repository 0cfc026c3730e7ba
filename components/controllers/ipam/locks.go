package ipam

// This file finds, checks and takes the IP locks of an attachment: the
// lock its status names, the locks it controls, the lock of an address it
// asks for or of a free one, and whether another lock's holder is gone.

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
)

// createAttempts bounds how many addresses one sync tries to lock when the
// cache thinks them free but the server finds them taken.
const createAttempts = 8

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

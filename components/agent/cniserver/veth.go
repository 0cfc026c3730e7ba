package cniserver

// This file plugs pods: it makes, checks and removes the veth pairs that
// join a pod's network namespace to the switch, with netlink. Which pair
// a CNI request wants, and when, is the business of add.go, del.go and
// check.go.

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"unsafe"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// veth is a veth pair that joins a pod to the switch: the host end, named
// as the attachment's interface (v1alpha1.InterfaceName), where the switch's
// ports live, and the pod end, named as the CNI request asks, with the
// attachment's MAC address and address.
type veth struct {
	// hostNetns is the path of the network namespace of the switch's
	// ports; the agent's own when empty.
	hostNetns string
	hostName  string
	// podNetns is the path through which the agent opens the pod's
	// network namespace: the descriptor kos-cni passed, or the path the
	// request named.
	podNetns string
	// sandbox is the path of the pod's network namespace as the runtime
	// named it (CNI_NETNS), for the result.
	sandbox string
	podName string
	mac     net.HardwareAddr
	// addr is the pod's address with the subnet's prefix length; the
	// kernel adds the route to the subnet with it.
	addr netip.Prefix
	// mtu is both ends' MTU; 0 leaves the kernel's default.
	mtu int
	// noChecksumOffload makes the pod compute the checksums of what it
	// sends (tx-checksumming off), for a switch that forwards packets as
	// they are: Open vSwitch's userspace datapath reads the host end
	// through a packet socket, where a checksum left to the device is
	// never filled in, and the receiver drops the packet.
	noChecksumOffload bool
}

// errNoNetns says that a network namespace does not exist (any more).
var errNoNetns = errors.New("network namespace does not exist")

// handleAt returns a netlink handle in the network namespace at path, or
// in the agent's own when path is empty.
func handleAt(path string) (*netlink.Handle, error) {
	if path == "" {
		h, err := netlink.NewHandle()
		if err != nil {
			return nil, fmt.Errorf("opening netlink: %w", err)
		}
		return h, nil
	}
	ns, err := netns.GetFromPath(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", path, errNoNetns)
	}
	if err != nil {
		return nil, fmt.Errorf("opening network namespace %s: %w", path, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("opening netlink in network namespace %s: %w", path, err)
	}
	return h, nil
}

// add makes the pair and configures both ends, and brings them up. It
// fails when the pod has an interface of that name already; on any
// failure it leaves no pair behind.
func (v *veth) add() (err error) {
	host, err := handleAt(v.hostNetns)
	if err != nil {
		return err
	}
	defer host.Close()
	pod, err := handleAt(v.podNetns)
	if err != nil {
		return err
	}
	defer pod.Close()
	if _, err := pod.LinkByName(v.podName); err == nil {
		return fmt.Errorf("the pod's network namespace %s has an interface %s already", v.podNetns, v.podName)
	}
	podNS, err := netns.GetFromPath(v.podNetns)
	if err != nil {
		return fmt.Errorf("opening network namespace %s: %w", v.podNetns, err)
	}
	defer podNS.Close()

	pair := &netlink.Veth{
		LinkAttrs:        netlink.LinkAttrs{Name: v.hostName, MTU: v.mtu},
		PeerName:         v.podName,
		PeerHardwareAddr: v.mac,
		PeerNamespace:    netlink.NsFd(int(podNS)),
		PeerMTU:          uint32(v.mtu),
	}
	if err := host.LinkAdd(pair); err != nil {
		return fmt.Errorf("creating veth pair %s/%s: %w", v.hostName, v.podName, err)
	}
	defer func() {
		if err != nil {
			// Deleting one end deletes the pair.
			_ = host.LinkDel(pair)
		}
	}()
	podLink, err := pod.LinkByName(v.podName)
	if err != nil {
		return fmt.Errorf("finding %s in the pod: %w", v.podName, err)
	}
	ipNet := &net.IPNet{IP: v.addr.Addr().AsSlice(), Mask: net.CIDRMask(v.addr.Bits(), 32)}
	if err := pod.AddrAdd(podLink, &netlink.Addr{IPNet: ipNet}); err != nil {
		return fmt.Errorf("adding address %s to %s in the pod: %w", v.addr, v.podName, err)
	}
	if v.noChecksumOffload {
		if err := inNetns(v.podNetns, func() error { return setTxChecksum(v.podName, false) }); err != nil {
			return fmt.Errorf("turning off checksum offload of %s in the pod: %w", v.podName, err)
		}
	}
	if err := pod.LinkSetUp(podLink); err != nil {
		return fmt.Errorf("setting %s up in the pod: %w", v.podName, err)
	}
	hostLink, err := host.LinkByName(v.hostName)
	if err != nil {
		return fmt.Errorf("finding %s: %w", v.hostName, err)
	}
	if err := host.LinkSetUp(hostLink); err != nil {
		return fmt.Errorf("setting %s up: %w", v.hostName, err)
	}
	return nil
}

// check returns what differs between the pod end and what it should be.
func (v *veth) check() error {
	pod, err := handleAt(v.podNetns)
	if err != nil {
		return err
	}
	defer pod.Close()
	link, err := pod.LinkByName(v.podName)
	if err != nil {
		return fmt.Errorf("the pod has no interface %s: %w", v.podName, err)
	}
	attrs := link.Attrs()
	var errs []error
	if link.Type() != "veth" {
		errs = append(errs, fmt.Errorf("interface %s is a %s, want a veth", v.podName, link.Type()))
	}
	if attrs.HardwareAddr.String() != v.mac.String() {
		errs = append(errs, fmt.Errorf("interface %s has MAC address %s, want %s", v.podName, attrs.HardwareAddr, v.mac))
	}
	if v.mtu != 0 && attrs.MTU != v.mtu {
		errs = append(errs, fmt.Errorf("interface %s has MTU %d, want %d", v.podName, attrs.MTU, v.mtu))
	}
	if attrs.Flags&net.FlagUp == 0 {
		errs = append(errs, fmt.Errorf("interface %s is down", v.podName))
	}
	addrs, err := pod.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("listing the addresses of %s in the pod: %w", v.podName, err)
	}
	if !slices.ContainsFunc(addrs, func(a netlink.Addr) bool {
		ip, ok := netip.AddrFromSlice(a.IP)
		ones, _ := a.Mask.Size()
		return ok && netip.PrefixFrom(ip.Unmap(), ones) == v.addr
	}) {
		errs = append(errs, fmt.Errorf("interface %s lacks address %s", v.podName, v.addr))
	}
	return errors.Join(errs...)
}

// deletePodEnd deletes the pod's interface podName if it is a veth, and
// with it the host end; it reports whether there was one. A network
// namespace that is gone has no interface left.
func deletePodEnd(podNetns, podName string) (bool, error) {
	if podNetns == "" {
		return false, nil
	}
	pod, err := handleAt(podNetns)
	if errors.Is(err, errNoNetns) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer pod.Close()
	return deleteVeth(pod, podName)
}

// deleteHostEnd deletes the veth named name where the switch's ports live,
// if there is one, and with it the pod's end.
func deleteHostEnd(hostNetns, name string) (bool, error) {
	host, err := handleAt(hostNetns)
	if err != nil {
		return false, err
	}
	defer host.Close()
	return deleteVeth(host, name)
}

// hostNameTaken reports whether an interface named name exists in the
// network namespace at hostNetns, such as an internal port of the switch.
func hostNameTaken(hostNetns, name string) (bool, error) {
	host, err := handleAt(hostNetns)
	if err != nil {
		return false, err
	}
	defer host.Close()
	_, err = host.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("finding interface %s: %w", name, err)
	}
	return true, nil
}

// deleteVeth deletes the veth named name, if there is one: only a veth,
// so that a request never deletes an interface someone else made.
func deleteVeth(h *netlink.Handle, name string) (bool, error) {
	link, err := h.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("finding interface %s: %w", name, err)
	}
	if link.Type() != "veth" {
		return false, nil
	}
	if err := h.LinkDel(link); err != nil {
		return false, fmt.Errorf("deleting veth %s: %w", name, err)
	}
	return true, nil
}

// inNetns calls fn on a thread of its own inside the network namespace at
// path; sockets fn opens stay in that namespace. The thread never serves
// another goroutine: it ends with the one inNetns starts.
func inNetns(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// Deliberately never unlocked: the runtime ends the thread when
		// this goroutine returns, so nothing else runs in the namespace.
		runtime.LockOSThread()
		ns, err := netns.GetFromPath(path)
		if err != nil {
			errc <- fmt.Errorf("opening network namespace %s: %w", path, err)
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("entering network namespace %s: %w", path, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// setTxChecksum turns the transmit checksum offload of interface name, in
// the calling thread's network namespace, on or off (ethtool -K name tx).
func setTxChecksum(name string, on bool) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening a socket: %w", err)
	}
	defer unix.Close(fd)
	value := ethtoolValue{cmd: unix.ETHTOOL_STXCSUM}
	if on {
		value.data = 1
	}
	var req ifreqData
	if len(name) >= len(req.name) {
		return fmt.Errorf("interface name %q is too long", name)
	}
	copy(req.name[:], name)
	req.data = uintptr(unsafe.Pointer(&value))
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&req))); errno != 0 {
		return fmt.Errorf("ethtool on %s: %w", name, errno)
	}
	runtime.KeepAlive(&value)
	return nil
}

// ethtoolValue is the kernel's struct ethtool_value.
type ethtoolValue struct {
	cmd, data uint32
}

// ifreqData is the kernel's struct ifreq with its union as a pointer, as
// SIOCETHTOOL reads it.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data uintptr
	_    [16]byte
}

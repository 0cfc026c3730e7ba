package kosinstall

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/ovsenv"
)

// netnsDir is where ip-netns names network namespaces.
const netnsDir = "/run/netns"

// GuestMTU is the MTU of a guest's interface: room for the VXLAN header
// within the underlay's 1500 bytes.
const GuestMTU = 1450

// Guest is a network namespace holding one attachment's interface, as a
// workload (a VM, a container) would use it.
type Guest struct {
	*ovsenv.Netns
	// Attachment is the attachment whose interface the guest holds.
	Attachment *v1alpha1.NetworkAttachment
	// IP is the attachment's address.
	IP netip.Addr
}

// PlumbGuest gives the attachment's interface to the guest namespace name:
// it creates the namespace unless it exists, moves the interface there from
// the node's network namespace nodeNetns (where the agent makes it), and
// configures it: the attachment's address with the subnet's prefix length,
// MTU GuestMTU, up. The agent makes the interface again when its node's Open
// vSwitch restarts (the one moved away dies with the daemon): calling
// PlumbGuest again moves the new one, so it serves for re-plumbing too.
func PlumbGuest(ctx context.Context, nodeNetns, name string, att *v1alpha1.NetworkAttachment, subnet netip.Prefix) (*Guest, error) {
	g, err := newGuest(att, name)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(netnsDir, name)); errors.Is(err, os.ErrNotExist) {
		if g.Netns, err = ovsenv.NewNetns(ctx, name); err != nil {
			return nil, err
		}
	}
	return g, g.plumb(ctx, nodeNetns, subnet)
}

// PlumbPod gives the attachment's interface to a running pod, as a workload
// got one before KOS had a CNI plugin (0.2.0): a plain NetworkAttachment on
// the pod's node whose interface is moved from the node's network namespace
// nodeNetns into the pod's and configured as PlumbGuest does, beside the
// pod's own interfaces (its primary network keeps the default route; the
// attachment's subnet is reached through the new interface). It finds the
// pod's network namespace from the host, through a process of one of its
// running containers, and names it pod-<UID> under /run/netns: the Guest
// it returns runs commands and opens sockets in the pod's network, and its
// Delete removes that name only, not the pod's namespace. Calling it again
// re-plumbs, as PlumbGuest does; a pod that restarted its sandbox has a
// new namespace, which this does not follow.
func PlumbPod(ctx context.Context, nodeNetns string, pod *corev1.Pod, att *v1alpha1.NetworkAttachment, subnet netip.Prefix) (*Guest, error) {
	name := "pod-" + string(pod.UID)
	g, err := newGuest(att, name)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(netnsDir, name)); errors.Is(err, os.ErrNotExist) {
		pid, err := podPID(pod)
		if err != nil {
			return nil, err
		}
		if out, err := exec.CommandContext(ctx, "ip", "netns", "attach", name, strconv.Itoa(pid)).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("naming the network namespace of pod %s/%s (PID %d) %s: %w: %s", pod.Namespace, pod.Name, pid, name, err, strings.TrimSpace(string(out)))
		}
	}
	return g, g.plumb(ctx, nodeNetns, subnet)
}

// podPID returns the host PID of the main process of one of the pod's
// running containers.
func podPID(pod *corev1.Pod) (int, error) {
	for _, st := range pod.Status.ContainerStatuses {
		if st.State.Running != nil {
			return ContainerPID(pod, st.Name)
		}
	}
	return 0, fmt.Errorf("pod %s/%s has no running container", pod.Namespace, pod.Name)
}

// ContainerPID returns the host PID of the main process (PID 1 in its
// PID namespace) of the named container of pod, found on this host through
// the container's ID in the processes' cgroups. The pod's node must run on
// this host, as tools/cluster's nodes do.
func ContainerPID(pod *corev1.Pod, container string) (int, error) {
	id := ""
	for _, st := range pod.Status.ContainerStatuses {
		if st.Name == container {
			_, id, _ = strings.Cut(st.ContainerID, "://")
		}
	}
	if id == "" {
		return 0, fmt.Errorf("container %s of pod %s/%s has no ID", container, pod.Namespace, pod.Name)
	}
	procs, err := filepath.Glob("/proc/[0-9]*/cgroup")
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(data), id) {
			continue // another container's, or gone meanwhile
		}
		status, err := os.ReadFile(filepath.Join(filepath.Dir(p), "status"))
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(status), "\n") {
			if ids, ok := strings.CutPrefix(line, "NSpid:"); ok {
				if f := strings.Fields(ids); len(f) > 1 && f[len(f)-1] == "1" {
					return strconv.Atoi(f[0])
				}
			}
		}
	}
	return 0, fmt.Errorf("no process on this host is PID 1 of container %s (%s) of pod %s/%s", container, id, pod.Namespace, pod.Name)
}

// newGuest returns the guest of the attachment in namespace name, once the
// attachment has its address and interface.
func newGuest(att *v1alpha1.NetworkAttachment, name string) (*Guest, error) {
	ip, err := netip.ParseAddr(att.Status.IPv4)
	if err != nil {
		return nil, fmt.Errorf("attachment %s/%s has no address yet: %w", att.Namespace, att.Name, err)
	}
	if att.Status.IfcName == "" {
		return nil, fmt.Errorf("attachment %s/%s has no interface yet", att.Namespace, att.Name)
	}
	return &Guest{Netns: &ovsenv.Netns{Name: name}, Attachment: att, IP: ip}, nil
}

// plumb moves the attachment's interface into the guest's namespace, which
// exists, and configures it.
func (g *Guest) plumb(ctx context.Context, nodeNetns string, subnet netip.Prefix) error {
	att, name, ifc := g.Attachment, g.Name, g.Attachment.Status.IfcName
	node := &ovsenv.Netns{Name: nodeNetns}
	if _, err := node.Run(ctx, "ip", "link", "show", ifc); err == nil {
		// The interface moved here before: dead since its Open vSwitch
		// stopped, and in the way of the new one.
		if _, err := g.Run(ctx, "ip", "link", "show", ifc); err == nil {
			if _, err := g.Run(ctx, "ip", "link", "delete", ifc); err != nil {
				return fmt.Errorf("deleting the old interface of attachment %s in guest %s: %w", att.Name, name, err)
			}
		}
		if _, err := node.Run(ctx, "ip", "link", "set", ifc, "netns", name); err != nil {
			return fmt.Errorf("moving the interface of attachment %s into guest %s: %w", att.Name, name, err)
		}
	} else if _, gerr := g.Run(ctx, "ip", "link", "show", ifc); gerr != nil {
		return fmt.Errorf("interface %s of attachment %s is neither in node namespace %s (%v) nor in guest %s", ifc, att.Name, nodeNetns, err, name)
	}
	for _, cmd := range [][]string{
		{"ip", "addr", "replace", netip.PrefixFrom(g.IP, subnet.Bits()).String(), "dev", ifc},
		{"ip", "link", "set", ifc, "mtu", strconv.Itoa(GuestMTU), "up"},
	} {
		if _, err := g.Run(ctx, cmd[0], cmd[1:]...); err != nil {
			return fmt.Errorf("configuring guest %s: %w", name, err)
		}
	}
	// The switch delivers to the attachment's MAC only. An interface moved
	// away while Open vSwitch was still setting it up keeps another one,
	// and the guest would get no reply from any peer.
	if want := att.Status.MACAddress; want != "" {
		got, err := g.Run(ctx, "cat", filepath.Join("/sys/class/net", ifc, "address"))
		if err != nil {
			return fmt.Errorf("reading the MAC address of %s in guest %s: %w", ifc, name, err)
		}
		if !strings.EqualFold(strings.TrimSpace(got), want) {
			return fmt.Errorf("interface %s in guest %s has MAC address %s, not attachment %s's %s", ifc, name, strings.TrimSpace(got), att.Name, want)
		}
	}
	return nil
}

// NeighbourMAC returns the MAC address the guest has learned for ip, or ""
// when it has none: after a ping, it tells which interface answered.
func (g *Guest) NeighbourMAC(ctx context.Context, ip netip.Addr) (string, error) {
	out, err := g.Run(ctx, "ip", "neigh", "show", ip.String())
	if err != nil {
		return "", err
	}
	fields := strings.Fields(out)
	for i, f := range fields {
		if f == "lladdr" && i+1 < len(fields) {
			return fields[i+1], nil
		}
	}
	return "", nil
}

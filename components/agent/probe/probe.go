// Package probe puts connectivity probes on a node's local attachments for
// `kubectl kos check`: the attachment's interface, moved out of the
// switch's network namespace into a fresh one of its own, with the
// attachment's address and MTU, where the kernel answers ping and a
// listener accepts TCP on api.ProbePort; and, from inside that namespace,
// a ping, a ping of a whole MTU with Don't Fragment set, and a TCP
// connection to another probe.
//
// A probe's network namespace has no name: only the Manager's descriptor
// and the probe's sockets hold it, so it dies with the agent's process
// whatever way that ends, and a restarted agent finds none left over (the
// kernel gives a dying namespace's interfaces to the host's, where a
// node's agent keeps them anyway). Stop moves the interface back where
// the switch's ports live, as the agent made it; an interface whose
// attachment is deleted goes with its switch port wherever it is.
package probe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/agent/api"
)

// ErrNoProbe is of a request for a probe that does not exist.
var ErrNoProbe = errors.New("no probe")

// Attachment is what a probe needs of a local attachment.
type Attachment struct {
	Namespace, Name string
	// UID tells a recreated attachment from the one probed.
	UID string
	// Interface is the name of the attachment's interface, where the
	// switch's ports live.
	Interface string
	// MAC is the interface's MAC address, which the switch delivers to.
	MAC net.HardwareAddr
	// Address is the attachment's address with its subnet's prefix
	// length.
	Address netip.Prefix
	// MTU is the attachment's MTU; 0 keeps the interface's.
	MTU int
}

// Key returns namespace/name.
func (a Attachment) Key() string { return a.Namespace + "/" + a.Name }

// Manager keeps the probes of one node.
type Manager struct {
	// hostNetns is the path of the network namespace of the switch's
	// ports; the agent's own when empty.
	hostNetns string

	// mu guards probes; a probe's own lock is taken after it, never
	// before.
	mu     sync.Mutex
	probes map[string]*probe
}

// NewManager returns a Manager of the probes of the switch whose ports
// live in the network namespace at hostNetns, the agent's own when empty.
func NewManager(hostNetns string) *Manager {
	return &Manager{hostNetns: hostNetns, probes: map[string]*probe{}}
}

// probe is one attachment's probe.
type probe struct {
	att Attachment
	// mu is held for reading by checks and for writing by stop, so that
	// no check uses a namespace being closed.
	mu       sync.RWMutex
	ns       netns.NsHandle
	wasUp    bool
	listener net.Listener
	accepted chan struct{}
	stopped  bool
}

// Start puts a probe on att, replacing one on an earlier attachment of the
// same name; a probe on att already is left as it is. On failure it leaves
// the interface where it found it.
func (m *Manager) Start(ctx context.Context, att Attachment) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.probes[att.Key()]; ok {
		if p.att.UID == att.UID && p.att.Address == att.Address {
			return nil
		}
		delete(m.probes, att.Key())
		if err := p.stop(m.hostNetns); err != nil {
			return fmt.Errorf("removing the earlier probe of %s: %w", att.Key(), err)
		}
	}
	p, err := start(m.hostNetns, att)
	if err != nil {
		return err
	}
	m.probes[att.Key()] = p
	klog.FromContext(ctx).Info("Started a probe", "attachment", att.Key(), "interface", att.Interface, "address", att.Address)
	return nil
}

// Stop removes the probe of namespace/name; it is not an error that there
// is none.
func (m *Manager) Stop(ctx context.Context, namespace, name string) error {
	key := namespace + "/" + name
	m.mu.Lock()
	p, ok := m.probes[key]
	delete(m.probes, key)
	m.mu.Unlock()
	if !ok {
		return nil
	}
	klog.FromContext(ctx).Info("Stopping a probe", "attachment", key)
	return p.stop(m.hostNetns)
}

// Forget removes the probe of namespace/name unless it is on the
// attachment of uid: the agent calls it when an attachment goes or is
// recreated (uid empty for gone).
func (m *Manager) Forget(ctx context.Context, namespace, name, uid string) {
	key := namespace + "/" + name
	m.mu.Lock()
	p, ok := m.probes[key]
	if !ok || (uid != "" && p.att.UID == uid) {
		m.mu.Unlock()
		return
	}
	delete(m.probes, key)
	m.mu.Unlock()
	// The attachment's switch port, and with it the interface, may be
	// gone already: there is nothing to move back then.
	if err := p.stop(m.hostNetns); err != nil {
		klog.FromContext(ctx).Error(err, "Removing the probe of a gone attachment failed", "attachment", key)
		return
	}
	klog.FromContext(ctx).Info("Removed the probe of a gone attachment", "attachment", key)
}

// StopAll removes every probe; the agent calls it as it stops.
func (m *Manager) StopAll(ctx context.Context) {
	m.mu.Lock()
	probes := m.probes
	m.probes = map[string]*probe{}
	m.mu.Unlock()
	for key, p := range probes {
		if err := p.stop(m.hostNetns); err != nil {
			klog.FromContext(ctx).Error(err, "Removing a probe failed", "attachment", key)
		}
	}
}

// Keys returns the keys (namespace/name) of the probes there are.
func (m *Manager) Keys() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	keys := make([]string, 0, len(m.probes))
	for k := range m.probes {
		keys = append(keys, k)
	}
	return keys
}

// Check asks the probe of req's attachment to reach req.To: see package
// api's ProbeCheckRequest. The request must be valid (ValidateCheck).
func (m *Manager) Check(ctx context.Context, req api.ProbeCheckRequest) (api.ProbeCheckResult, error) {
	m.mu.Lock()
	p, ok := m.probes[req.Namespace+"/"+req.Name]
	m.mu.Unlock()
	if !ok {
		return api.ProbeCheckResult{}, fmt.Errorf("%w on attachment %s/%s", ErrNoProbe, req.Namespace, req.Name)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.stopped {
		return api.ProbeCheckResult{}, fmt.Errorf("%w on attachment %s/%s any more", ErrNoProbe, req.Namespace, req.Name)
	}
	return p.check(ctx, req), nil
}

// newNetns returns a new network namespace, which only the returned
// descriptor holds.
func newNetns() (netns.NsHandle, error) {
	type result struct {
		ns  netns.NsHandle
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Deliberately never unlocked: the runtime ends the thread, which
		// unshare moved into the new namespace, when this goroutine
		// returns.
		runtime.LockOSThread()
		ns, err := netns.New()
		done <- result{ns, err}
	}()
	r := <-done
	if r.err != nil {
		return netns.None(), fmt.Errorf("creating a network namespace: %w", r.err)
	}
	return r.ns, nil
}

// inNetns runs f on a thread in network namespace ns; sockets f opens stay
// in ns.
func inNetns(ns netns.NsHandle, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked, as in newNetns.
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			errc <- fmt.Errorf("entering the probe's network namespace: %w", err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// handleAt returns a netlink handle in the network namespace at path, the
// agent's own when empty.
func handleAt(path string) (*netlink.Handle, netns.NsHandle, error) {
	var ns netns.NsHandle
	var err error
	if path == "" {
		ns, err = netns.Get()
	} else {
		ns, err = netns.GetFromPath(path)
	}
	if err != nil {
		return nil, netns.None(), fmt.Errorf("opening the switch's network namespace: %w", err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		return nil, netns.None(), fmt.Errorf("opening netlink in the switch's network namespace: %w", err)
	}
	return h, ns, nil
}

// start makes the probe of att.
func start(hostNetns string, att Attachment) (_ *probe, err error) {
	host, hostNS, err := handleAt(hostNetns)
	if err != nil {
		return nil, err
	}
	defer host.Close()
	defer hostNS.Close()
	link, err := host.LinkByName(att.Interface)
	if err != nil {
		return nil, fmt.Errorf("finding interface %s of attachment %s: %w", att.Interface, att.Key(), err)
	}
	if got := link.Attrs().HardwareAddr; got.String() != att.MAC.String() {
		return nil, fmt.Errorf("interface %s has MAC address %s, not attachment %s's %s", att.Interface, got, att.Key(), att.MAC)
	}
	p := &probe{att: att, wasUp: link.Attrs().Flags&net.FlagUp != 0, accepted: make(chan struct{})}
	if p.ns, err = newNetns(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, p.stop(hostNetns))
		}
	}()
	if err := host.LinkSetNsFd(link, int(p.ns)); err != nil {
		return nil, fmt.Errorf("moving interface %s into the probe's network namespace: %w", att.Interface, err)
	}
	if err := p.configure(); err != nil {
		return nil, err
	}
	if err := inNetns(p.ns, func() (err error) {
		p.listener, err = net.Listen("tcp4", fmt.Sprintf(":%d", api.ProbePort))
		return err
	}); err != nil {
		return nil, fmt.Errorf("listening on TCP port %d in the probe's network namespace: %w", api.ProbePort, err)
	}
	go p.accept()
	return p, nil
}

// configure gives the probe's interface its address and MTU and brings it
// and loopback up; the kernel adds the route to the subnet with the
// address.
func (p *probe) configure() error {
	h, err := netlink.NewHandleAt(p.ns)
	if err != nil {
		return fmt.Errorf("opening netlink in the probe's network namespace: %w", err)
	}
	defer h.Close()
	if lo, err := h.LinkByName("lo"); err == nil {
		if err := h.LinkSetUp(lo); err != nil {
			return fmt.Errorf("setting loopback up in the probe's network namespace: %w", err)
		}
	}
	link, err := h.LinkByName(p.att.Interface)
	if err != nil {
		return fmt.Errorf("finding interface %s in the probe's network namespace: %w", p.att.Interface, err)
	}
	addr := &net.IPNet{IP: p.att.Address.Addr().AsSlice(), Mask: net.CIDRMask(p.att.Address.Bits(), 32)}
	if err := h.AddrReplace(link, &netlink.Addr{IPNet: addr}); err != nil {
		return fmt.Errorf("adding address %s to %s: %w", p.att.Address, p.att.Interface, err)
	}
	if p.att.MTU > 0 {
		if err := h.LinkSetMTU(link, p.att.MTU); err != nil {
			return fmt.Errorf("setting the MTU of %s to %d: %w", p.att.Interface, p.att.MTU, err)
		}
	}
	if err := h.LinkSetUp(link); err != nil {
		return fmt.Errorf("setting %s up: %w", p.att.Interface, err)
	}
	return nil
}

// accept accepts connections and closes them until the listener closes.
func (p *probe) accept() {
	defer close(p.accepted)
	for {
		c, err := p.listener.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

// stop closes the listener, moves the interface back into the switch's
// network namespace at hostNetns, up if it was, and closes the probe's
// namespace, which then goes.
func (p *probe) stop(hostNetns string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return nil
	}
	p.stopped = true
	if p.listener != nil {
		p.listener.Close()
		<-p.accepted
	}
	defer p.ns.Close()
	h, err := netlink.NewHandleAt(p.ns)
	if err != nil {
		return fmt.Errorf("opening netlink in the probe's network namespace: %w", err)
	}
	defer h.Close()
	link, err := h.LinkByName(p.att.Interface)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil // gone with its switch port
	}
	if err != nil {
		return fmt.Errorf("finding interface %s in the probe's network namespace: %w", p.att.Interface, err)
	}
	host, hostNS, err := handleAt(hostNetns)
	if err != nil {
		return err
	}
	defer host.Close()
	defer hostNS.Close()
	// Moving the interface drops its addresses and brings it down.
	if err := h.LinkSetNsFd(link, int(hostNS)); err != nil {
		return fmt.Errorf("moving interface %s back into the switch's network namespace: %w", p.att.Interface, err)
	}
	if p.wasUp {
		back, err := host.LinkByName(p.att.Interface)
		if err != nil {
			return fmt.Errorf("finding interface %s back in the switch's network namespace: %w", p.att.Interface, err)
		}
		if err := host.LinkSetUp(back); err != nil {
			return fmt.Errorf("setting %s up: %w", p.att.Interface, err)
		}
	}
	return nil
}

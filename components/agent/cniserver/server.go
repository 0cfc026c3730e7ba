// Package cniserver is kos-agent's CNI server: it answers kos-cni's
// requests on a Unix socket, finding each pod's attachment in the agent's
// cache of its node's attachments and plugging a veth pair into the pod in
// place of the attachment's internal port (veth.go makes the pair; the
// switch attaches its host end). What it needs of the agent is the Agent
// interface; of the switch, Ports.
package cniserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kwait "k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/cni"
	"github.com/kos-sdn/kos/components/fabric"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
)

// DefaultWait bounds how long an ADD waits for the pod's attachment.
const DefaultWait = 60 * time.Second

// DefaultTotalWait bounds how long all the ADDs of one sandbox wait
// together, from the first: Multus runs them one after the other within
// kubelet's one RunPodSandbox call, which kubelet gives up on after its
// --runtime-request-timeout (2 minutes by default), so that a pod of
// three networks gets an answer from KOS, not from kubelet's timeout.
const DefaultTotalWait = 90 * time.Second

// pollInterval is how often a waiting ADD looks at the cache again.
const pollInterval = 20 * time.Millisecond

// Config configures the CNI server, which plugs pods' interfaces for
// kos-cni.
type Config struct {
	// Socket is the path of the Unix socket to serve kos-cni on, such as
	// cni.DefaultSocket; the agent serves no CNI requests when it is empty.
	Socket string
	// Wait bounds how long an ADD waits for the pod's attachment to exist,
	// have its address and be ready on this node. DefaultWait when zero.
	Wait time.Duration
	// TotalWait bounds how long the ADDs of one sandbox (container ID)
	// wait together, from the first; DefaultTotalWait when zero.
	TotalWait time.Duration
	// HostNetns is the path of the network namespace where the switch's
	// ports live, where the host ends of pods' veth pairs go; the agent's
	// own when empty, as on nodes, where the agent and Open vSwitch share
	// the host's.
	HostNetns string
	// NoChecksumOffload makes pods compute the checksums of what they
	// send, as Open vSwitch's userspace datapath needs (see
	// veth.noChecksumOffload).
	NoChecksumOffload bool
}

// Agent is what the server needs of the node agent: its cache of its
// node's attachments, their readiness, and the use of an attachment's
// place on the switch apart from the agent's syncs and reconciles.
type Agent interface {
	// Healthy returns nil when the agent is ready (CNI STATUS).
	Healthy() error
	// CachedAttachment returns the attachment key (namespace/name) of the
	// agent's node from its cache.
	CachedAttachment(key string) (*v1alpha1.NetworkAttachment, bool)
	// PodAttachments returns the attachments of the agent's node in
	// namespace that the pod-network controller made for pod (by name).
	PodAttachments(namespace, pod string) []*v1alpha1.NetworkAttachment
	// Address returns the address IPAM gave att, if it has a valid one.
	Address(att *v1alpha1.NetworkAttachment) (fabric.LocalAttachment, bool)
	// NotReady returns why att, at address at, is not ready on the
	// agent's node yet (its status and the switch), or "".
	NotReady(att *v1alpha1.NetworkAttachment, at fabric.LocalAttachment) string
	// Hold keeps the agent's syncs and reconciles off the switch's place
	// of at until release is called. notHeld says what the agent holds
	// there instead when that is not attachment key, local.
	Hold(at fabric.LocalAttachment, key string) (release func(), notHeld error)
	// Lost says that the switch may not hold what it should at at, for
	// attachment key, so that the agent's sync of key repairs it. It is
	// called while holding at.
	Lost(at fabric.LocalAttachment, key string)
}

// Ports is what the server changes on the node's switch: the ports of
// local attachments (fabric.Interface has them; the agent passes one that
// measures each operation).
type Ports interface {
	MTU() int
	CreateLocal(ctx context.Context, atts ...fabric.LocalAttachment) error
	DeleteLocal(ctx context.Context, atts ...fabric.LocalAttachment) error
	DeletePorts(ctx context.Context, atts ...fabric.LocalAttachment) error
	PlugLocal(ctx context.Context, plugs ...fabric.Plug) error
	Plugs(ctx context.Context, atts ...fabric.LocalAttachment) ([]fabric.Plug, error)
}

// Server answers kos-cni's requests for one node's agent.
type Server struct {
	cfg    Config
	node   string
	agent  Agent
	ports  Ports
	client kosclient.Interface
	// retry is how often a socket that could not be opened is tried again.
	retry time.Duration
	// observe records the duration of a request by command and outcome.
	observe func(command, outcome string, d time.Duration)
	// sandboxes are the live sandboxes the server plugged, for Replug.
	sandboxes sandboxes
	// budgets are the total waits of sandboxes' ADDs.
	budgets budgets
	// peerUID is the only user whose processes may connect: root, who
	// runs kos-cni.
	peerUID uint32
}

// New returns the CNI server of agent a on node, which reads Subnets with
// client, changes ports, tries a socket that does not open again every
// retry, and tells observe how long each request took.
func New(cfg Config, node string, a Agent, ports Ports, client kosclient.Interface, retry time.Duration, observe func(command, outcome string, d time.Duration)) *Server {
	if cfg.Wait <= 0 {
		cfg.Wait = DefaultWait
	}
	if cfg.TotalWait <= 0 {
		cfg.TotalWait = DefaultTotalWait
	}
	return &Server{cfg: cfg, node: node, agent: a, ports: ports, client: client, retry: retry, observe: observe}
}

// Run serves kos-cni's requests on the CNI socket until ctx is done.
// A socket that cannot be opened is tried again every retry period: until
// it opens, kos-cni's ADDs fail ("kos-agent not reachable") and its DELs
// succeed. It returns once the server and every request have stopped.
func (s *Server) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("socket", s.cfg.Socket)
	var l net.Listener
	for {
		var err error
		if l, err = listenUnix(s.cfg.Socket); err == nil {
			break
		}
		logger.Error(err, "Serving CNI requests failed; will retry")
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.retry):
		}
	}
	srv := &http.Server{
		Handler:     http.HandlerFunc(s.handle),
		BaseContext: func(net.Listener) context.Context { return ctx },
		// kos-cni passes the pod's network namespace as a descriptor.
		ConnContext:       cni.NetnsConnContext,
		ReadHeaderTimeout: 10 * time.Second,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		// Requests get ctx, so those waiting return at once.
		_ = srv.Shutdown(context.Background())
	}()
	logger.Info("Serving CNI requests")
	l = &peerListener{Listener: l, uid: s.peerUID, logger: logger}
	if err := srv.Serve(cni.NetnsListener(l)); !errors.Is(err, http.ErrServerClosed) {
		logger.Error(err, "Serving CNI requests stopped")
	}
	<-done
}

// listenUnix listens on a Unix socket at path, which only root may use,
// replacing the socket a previous agent left. The socket's folder is made
// root's alone (0700): kubelet creates the agent's hostPath folder 0755.
func listenUnix(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the folder of %s: %w", path, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("restricting the folder of %s to root: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing the old socket %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("restricting %s to root: %w", path, err)
	}
	return l, nil
}

// handle answers one kos-cni request: 200 with the result, if any, or a
// CNI error.
func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	var req cni.Request
	var cniErr *types.Error
	var result *types100.Result
	start := time.Now()
	if r.Method != http.MethodPost || r.URL.Path != cni.RequestPath {
		cniErr = types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("kos-agent serves POST %s, not %s %s: kos-cni and kos-agent differ in version", cni.RequestPath, r.Method, r.URL.Path), "")
	} else if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		cniErr = types.NewError(types.ErrDecodingFailure, fmt.Sprintf("decoding the request: %v", err), "")
	} else {
		logger := klog.FromContext(r.Context()).WithValues("command", req.Command, "pod", req.Pod.String(), "containerID", req.ContainerID, "ifname", req.IfName)
		ctx := klog.NewContext(r.Context(), logger)
		result, cniErr = s.request(ctx, &req)
		if cniErr != nil {
			logger.Info("CNI request failed", "duration", time.Since(start), "code", cniErr.Code, "err", cniErr.Msg)
		} else {
			logger.V(2).Info("Served a CNI request", "duration", time.Since(start))
		}
	}
	outcome := "ok"
	if cniErr != nil {
		outcome = "error"
	}
	s.observe(req.Command, outcome, time.Since(start))

	w.Header().Set("Content-Type", "application/json")
	var body any
	switch {
	case cniErr != nil:
		w.WriteHeader(httpStatus(cniErr.Code))
		body = cniErr
	case result != nil:
		body = result
	default:
		return
	}
	// The plugin sees a failed write as an agent that did not answer.
	_ = json.NewEncoder(w).Encode(body)
}

// httpStatus is the HTTP status of a CNI error; kos-cni reads only the
// body, but logs and curl are easier to read with a fitting one.
func httpStatus(code uint) int {
	switch code {
	case types.ErrTryAgainLater, types.ErrPluginNotAvailable:
		return http.StatusServiceUnavailable
	case types.ErrInternal:
		return http.StatusInternalServerError
	}
	return http.StatusBadRequest
}

// request carries out one request.
func (s *Server) request(ctx context.Context, req *cni.Request) (*types100.Result, *types.Error) {
	switch req.Command {
	case cni.CommandAdd:
		return s.add(ctx, req)
	case cni.CommandDel:
		s.del(ctx, req)
		return nil, nil
	case cni.CommandCheck:
		return nil, s.check(ctx, req)
	case cni.CommandGC:
		s.gc(ctx, req)
		return nil, nil
	case cni.CommandStatus:
		if err := s.agent.Healthy(); err != nil {
			return nil, types.NewError(types.ErrPluginNotAvailable, fmt.Sprintf("kos-agent on node %s is not ready: %v", s.node, err), "")
		}
		return nil, nil
	}
	return nil, types.NewError(types.ErrInvalidEnvironmentVariables, fmt.Sprintf("unknown CNI command %q", req.Command), "")
}

// cniError returns a CNI error with a formatted message.
func cniError(code uint, format string, args ...any) *types.Error {
	return types.NewError(code, fmt.Sprintf(format, args...), "")
}

// podPlug is what a request plugs: the pod's attachment, its address, and
// the veth pair.
type podPlug struct {
	key   string
	addr  fabric.LocalAttachment
	owner string
	veth  *veth
	// pod says that the attachment is a pod's (it has the pod-UID label):
	// the agent makes it no internal port, so the veth is its only port,
	// and a failed plug or a DEL leaves it none.
	pod bool
}

// podOwned reports whether an attachment is a pod's, labelled with its
// UID by kos-controller-manager.
func podOwned(att *v1alpha1.NetworkAttachment) bool {
	return att.Labels[v1alpha1.PodUIDLabel] != ""
}

// plugOwner is the owner recorded on the port of a pod's interface: the
// sandbox and interface a CNI request names.
func plugOwner(req *cni.Request) string { return req.ContainerID + "/" + req.IfName }

// add waits for the pod's attachment to be ready on this node, then
// plugs a veth pair into the pod as the attachment's port (a pod's
// attachment has none before; a plain one's internal port makes way), and
// returns the CNI result. An ADD of a sandbox and interface
// plugged already plugs them anew.
func (s *Server) add(ctx context.Context, req *cni.Request) (*types100.Result, *types.Error) {
	switch {
	case req.ContainerID == "" || req.IfName == "" || req.Netns == "":
		return nil, cniError(types.ErrInvalidEnvironmentVariables, "ADD needs a container ID, an interface name and a network namespace")
	case req.Pod.Namespace == "" || req.Pod.Name == "":
		return nil, cniError(types.ErrInvalidEnvironmentVariables, "CNI_ARGS names no pod (K8S_POD_NAMESPACE and K8S_POD_NAME)")
	case req.Subnet == "":
		return nil, cniError(types.ErrInvalidNetworkConfig, "network configuration %q names no subnet", req.Network)
	}
	prefix, cniErr := s.subnetPrefix(ctx, req.Pod.Namespace, req.Subnet)
	if cniErr != nil {
		return nil, cniErr
	}
	wait := s.cfg.Wait
	if !isReplug(ctx) {
		if wait, cniErr = s.budgets.wait(req.ContainerID, s.cfg.Wait, s.cfg.TotalWait, time.Now()); cniErr != nil {
			return nil, cniErr
		}
	}
	att, addr, cniErr := s.awaitPodAttachment(ctx, req, wait)
	if cniErr != nil {
		return nil, cniErr
	}
	if att.Spec.Subnet != req.Subnet {
		return nil, cniError(types.ErrInvalidNetworkConfig, "NetworkAttachment %s is in subnet %s, but network %q names subnet %s", cache.MetaObjectToName(att).String(), att.Spec.Subnet, req.Network, req.Subnet)
	}
	if err := checkRequestedIPs(req.IPs, addr.IP); err != nil {
		return nil, cniError(types.ErrInvalidNetworkConfig, "NetworkAttachment %s has address %s: %v", cache.MetaObjectToName(att).String(), addr.IP, err)
	}
	if err := checkRequestedMAC(req.MAC, addr.MAC()); err != nil {
		return nil, cniError(types.ErrInvalidNetworkConfig, "NetworkAttachment %s: %v", cache.MetaObjectToName(att).String(), err)
	}
	p := s.podPlugOf(ctx, req, cache.MetaObjectToName(att).String(), addr, prefix)
	p.pod = podOwned(att)
	if err := s.plug(ctx, p); err != nil {
		return nil, cniError(types.ErrInternal, "plugging interface %s of pod %s (NetworkAttachment %s, address %s): %v", req.IfName, req.Pod, p.key, addr.IP, err)
	}
	s.sandboxes.remember(ctx, p.key, req)
	return p.result(), nil
}

// subnetPrefix returns the prefix length of a subnet, or a CNI error that
// says it does not exist.
func (s *Server) subnetPrefix(ctx context.Context, ns, name string) (int, *types.Error) {
	subnet, err := s.client.NetworkV1alpha1().Subnets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, cniError(types.ErrInvalidNetworkConfig, "subnet %s not found in namespace %s", name, ns)
	}
	if err != nil {
		return 0, cniError(types.ErrTryAgainLater, "reading subnet %s in namespace %s: %v", name, ns, err)
	}
	p, err := netip.ParsePrefix(subnet.Spec.IPv4)
	if err != nil {
		return 0, cniError(types.ErrInvalidNetworkConfig, "subnet %s in namespace %s has no valid CIDR block (%q): %v", name, ns, subnet.Spec.IPv4, err)
	}
	return p.Bits(), nil
}

// podPlugOf returns what a request plugs for the attachment key at addr,
// in a subnet with prefix length bits.
func (s *Server) podPlugOf(ctx context.Context, req *cni.Request, key string, addr fabric.LocalAttachment, bits int) *podPlug {
	mac := addr.MAC()
	return &podPlug{
		key:   key,
		addr:  addr,
		owner: plugOwner(req),
		veth: &veth{
			hostNetns:         s.cfg.HostNetns,
			hostName:          v1alpha1.InterfaceName(mac),
			podNetns:          cni.NetnsPath(ctx, req.Netns),
			sandbox:           req.Netns,
			podName:           req.IfName,
			mac:               mac,
			addr:              netip.PrefixFrom(addr.IP, bits),
			mtu:               s.ports.MTU(),
			noChecksumOffload: s.cfg.NoChecksumOffload,
		},
	}
}

// result is the CNI 1.0 result of a plug: the pod's interface, its address
// and the route to its subnet, which the kernel made with the address.
func (p *podPlug) result() *types100.Result {
	v := p.veth
	subnet := v.addr.Masked()
	zero := 0
	return &types100.Result{
		CNIVersion: types100.ImplementedSpecVersion,
		Interfaces: []*types100.Interface{{Name: v.podName, Mac: v.mac.String(), Mtu: v.mtu, Sandbox: v.sandbox}},
		IPs: []*types100.IPConfig{{
			Interface: &zero,
			Address:   net.IPNet{IP: v.addr.Addr().AsSlice(), Mask: net.CIDRMask(v.addr.Bits(), 32)},
		}},
		Routes: []*types.Route{{Dst: net.IPNet{IP: subnet.Addr().AsSlice(), Mask: net.CIDRMask(subnet.Bits(), 32)}}},
	}
}

// checkRequestedIPs returns an error when a pod asked for addresses and
// has is none of them.
func checkRequestedIPs(ips []string, has netip.Addr) error {
	if len(ips) == 0 {
		return nil
	}
	for _, s := range ips {
		ip, err := netip.ParseAddr(s)
		if p, perr := netip.ParsePrefix(s); err != nil && perr == nil {
			ip, err = p.Addr(), nil
		}
		if err == nil && ip == has {
			return nil
		}
	}
	return fmt.Errorf("the pod asked for %s", strings.Join(ips, ", "))
}

// checkRequestedMAC returns an error when a pod asked for a MAC address
// (the "mac" capability) that is not has, the attachment's: KOS's flows and
// the host end's name follow from it, so it cannot be honoured.
func checkRequestedMAC(mac string, has net.HardwareAddr) error {
	if mac == "" {
		return nil
	}
	if hw, err := net.ParseMAC(mac); err == nil && bytes.Equal(hw, has) {
		return nil
	}
	return fmt.Errorf("the pod asked for MAC address %s, but a KOS interface has its attachment's, %s, which follows from its address: remove \"mac\" from the pod's network selection", mac, has)
}

// generatedName matches the interface names Multus makes up, net<N>.
var generatedName = regexp.MustCompile(`^net[0-9]+$`)

// defaultNetworksHint ends the message of an ADD that finds no attachment
// for a made-up interface name, nor one Multus's defaultNetworks shifted
// it from.
const defaultNetworksHint = "; an interface net<N> that Multus numbered after its defaultNetworks stands for the pod's first attachment of the same subnet named net<M>, M < N, that no other interface of the sandbox has, and there is none yet"

// podAttachment returns the local attachment of a pod's interface from the
// cache, with its address if it has one, or why there is none yet: the
// attachment this sandbox's interface was plugged for, else the one the
// controller named for the interface, else, for a made-up name net<N> that
// Multus numbered after its defaultNetworks, the one it stands for
// (names.go).
func (s *Server) podAttachment(req *cni.Request) (*v1alpha1.NetworkAttachment, string) {
	if key, ok := s.sandboxes.keyOf(req.ContainerID, req.IfName); ok {
		if att, exists := s.agent.CachedAttachment(key); exists && att.Labels[v1alpha1.PodUIDLabel] != "" && (req.Pod.UID == "" || att.Labels[v1alpha1.PodUIDLabel] == req.Pod.UID) {
			return att, ""
		}
	}
	key := req.Pod.Namespace + "/" + v1alpha1.AttachmentName(req.Pod.Name, req.IfName)
	att, exists := s.agent.CachedAttachment(key)
	var why string
	switch {
	case !exists:
		why = fmt.Sprintf("no NetworkAttachment %s for interface %s of pod %s on node %s: kos-controller-manager makes it once the pod's k8s.v1.cni.cncf.io/networks annotation names a NetworkAttachmentDefinition of type kos (see the pod's events)", key, req.IfName, req.Pod, s.node)
	case req.Pod.UID != "" && att.Labels[v1alpha1.PodUIDLabel] != req.Pod.UID:
		why = fmt.Sprintf("NetworkAttachment %s is for pod UID %s, not %s: an earlier pod of that name's, which kos-controller-manager replaces", key, att.Labels[v1alpha1.PodUIDLabel], req.Pod.UID)
	case att.Annotations[v1alpha1.InterfaceAnnotation] != req.IfName:
		why = fmt.Sprintf("NetworkAttachment %s is for interface %q, not %s (see the pod's events)", key, att.Annotations[v1alpha1.InterfaceAnnotation], req.IfName)
	case req.Subnet != "" && att.Spec.Subnet != req.Subnet:
		// Another entry's, if Multus shifted the names; add says so
		// if no entry of the request's subnet comes before it.
		if shifted := s.shiftedAttachment(req); shifted != nil {
			return shifted, ""
		}
		return att, ""
	default:
		return att, ""
	}
	if shifted := s.shiftedAttachment(req); shifted != nil {
		return shifted, ""
	}
	if !exists && generatedName.MatchString(req.IfName) {
		why += defaultNetworksHint
	}
	return nil, why
}

// shiftedAttachment returns the attachment a request's made-up interface
// name stands for when Multus numbered it after its defaultNetworks, or
// nil.
func (s *Server) shiftedAttachment(req *cni.Request) *v1alpha1.NetworkAttachment {
	if _, ok := generatedNumber(req.IfName); !ok {
		return nil
	}
	return pickShifted(req, s.agent.PodAttachments(req.Pod.Namespace, req.Pod.Name), s.sandboxes.pluggedFor)
}

// awaitPodAttachment waits, up to wait, for the pod's attachment
// to exist, to have its address and to be ready on this node, and returns
// it. The error says what it was waiting for; an attachment whose status
// holds IPAM's errors instead of an address fails at once with them.
func (s *Server) awaitPodAttachment(ctx context.Context, req *cni.Request, wait time.Duration) (*v1alpha1.NetworkAttachment, fabric.LocalAttachment, *types.Error) {
	var att *v1alpha1.NetworkAttachment
	var addr fabric.LocalAttachment
	var why string
	var failed *types.Error
	err := kwait.PollUntilContextTimeout(ctx, pollInterval, wait, true, func(context.Context) (bool, error) {
		att, why = s.podAttachment(req)
		if att == nil {
			return false, nil
		}
		var ok bool
		if addr, ok = s.agent.Address(att); !ok {
			// IPAM said why it gave no address (a requested address
			// out of range or taken, a full subnet): waiting would
			// only hide that. Kubelet tries again after code 11,
			// and IPAM clears the error once it can assign one.
			switch {
			case len(att.Status.Errors.IPAM) > 0:
				failed = cniError(types.ErrTryAgainLater, "NetworkAttachment %s has no address: %s", cache.MetaObjectToName(att).String(), strings.Join(att.Status.Errors.IPAM, "; "))
				return true, nil
			case att.Status.AddressContention:
				failed = cniError(types.ErrTryAgainLater, "subnet %s has no free address for NetworkAttachment %s", att.Spec.Subnet, cache.MetaObjectToName(att).String())
				return true, nil
			}
			why = fmt.Sprintf("NetworkAttachment %s has no address yet", cache.MetaObjectToName(att).String())
			return false, nil
		}
		if why = s.agent.NotReady(att, addr); why != "" {
			return false, nil
		}
		return true, nil
	})
	switch {
	case failed != nil:
		return nil, fabric.LocalAttachment{}, failed
	case ctx.Err() != nil:
		return nil, fabric.LocalAttachment{}, cniError(types.ErrTryAgainLater, "kos-agent on node %s stopped while waiting: %s", s.node, why)
	case err != nil:
		return nil, fabric.LocalAttachment{}, cniError(types.ErrTryAgainLater, "waited %s: %s", wait.Round(time.Millisecond), why)
	}
	return att, addr, nil
}

// plug makes the pod's veth pair the attachment's port: it deletes the
// veth of an earlier sandbox (which has the name the new one needs), takes
// the port of that name off the switch if there is one, makes the pair and
// plugs its host end, which replaces the flows. A pod's attachment has no
// port before its first plug, so its ADD costs the plug alone. It holds the address's lock throughout, so that no sync
// or reconcile sees the attachment half plugged. On failure it leaves the
// attachment as the agent makes it: a plain one with an internal port, a
// pod's with none.
func (s *Server) plug(ctx context.Context, p *podPlug) (err error) {
	release, notHeld := s.agent.Hold(p.addr, p.key)
	defer release()
	if notHeld != nil {
		return fmt.Errorf("the switch no longer holds the attachment for it (%w); try again", notHeld)
	}
	defer func() {
		if err != nil {
			s.restorePort(ctx, p)
		}
	}()
	// A port the switch keeps for an interface of the name the veth
	// needs must go first: an earlier sandbox's veth (the switch would
	// not open the new one under its port), an internal port (a plain
	// attachment's, or one an older agent made for a pod's, or the
	// agent's repair of a pod's whose veth vanished).
	taken, err := deleteHostEnd(p.veth.hostNetns, p.veth.hostName)
	if err != nil {
		return fmt.Errorf("deleting the veth of an earlier sandbox: %w", err)
	}
	if !taken && p.pod {
		if taken, err = hostNameTaken(p.veth.hostNetns, p.veth.hostName); err != nil {
			return err
		}
	}
	if taken || !p.pod {
		// Only the port goes: PlugLocal replaces the flows it leaves.
		if err := s.ports.DeletePorts(ctx, p.addr); err != nil {
			s.agent.Lost(p.addr, p.key)
			return fmt.Errorf("taking the internal port off the switch: %w", err)
		}
	}
	if err := p.veth.add(); err != nil {
		return err
	}
	if err := s.ports.PlugLocal(ctx, fabric.Plug{LocalAttachment: p.addr, Owner: p.owner}); err != nil {
		return fmt.Errorf("plugging %s into the switch: %w", p.veth.hostName, err)
	}
	klog.FromContext(ctx).V(2).Info("Plugged a pod's interface", "attachment", p.key, "address", p.addr, "interface", p.veth.hostName)
	return nil
}

// restorePort deletes the pod's veth pair and leaves the attachment as the
// agent makes it: a pod's without a port (its port and flows go, until the
// next plug), a plain one with an internal port again; when that fails,
// the agent's sync repairs it.
func (s *Server) restorePort(ctx context.Context, p *podPlug) {
	if _, err := deleteHostEnd(p.veth.hostNetns, p.veth.hostName); err != nil {
		klog.FromContext(ctx).Error(err, "Deleting a pod's veth failed", "attachment", p.key)
	}
	if p.pod {
		if err := s.ports.DeleteLocal(ctx, p.addr); err != nil {
			klog.FromContext(ctx).Error(err, "Taking a pod's port off the switch failed; its sync repairs it", "attachment", p.key)
			s.agent.Lost(p.addr, p.key)
		}
		return
	}
	if err := s.ports.CreateLocal(ctx, p.addr); err != nil {
		klog.FromContext(ctx).Error(err, "Giving an attachment its internal port back failed; its sync repairs it", "attachment", p.key)
		s.agent.Lost(p.addr, p.key)
	}
}

// del removes the interface a sandbox got: the pod's end of the veth
// pair, in the sandbox's namespace if it is still there, and the port, if
// the sandbox still owns it; a pod's attachment is left without a port
// (the pod's next sandbox plugs one), a plain one gets an internal port
// back. A DEL never fails: whatever it cannot remove goes with the
// sandbox's namespace, or with the attachment. A stale DEL (of an earlier
// sandbox) removes nothing of the current one: its namespace is another,
// and the port names another owner.
func (s *Server) del(ctx context.Context, req *cni.Request) {
	logger := klog.FromContext(ctx)
	if req.IfName == "" {
		return
	}
	if _, err := deletePodEnd(cni.NetnsPath(ctx, req.Netns), req.IfName); err != nil {
		logger.Error(err, "Deleting the pod's interface failed; it goes with the sandbox")
	}
	if req.Pod.Namespace == "" || req.Pod.Name == "" || req.ContainerID == "" {
		return
	}
	s.budgets.end(req.ContainerID)
	// The port names its sandbox and interface, so the attachment whose
	// port it is can be tried among those the interface may stand for:
	// the one remembered for it, the one named for it, and those Multus
	// may have shifted its name from (names.go).
	var keys []string
	if key, ok := s.sandboxes.keyOf(req.ContainerID, req.IfName); ok {
		keys = append(keys, key)
	}
	keys = append(keys, req.Pod.Namespace+"/"+v1alpha1.AttachmentName(req.Pod.Name, req.IfName))
	if _, ok := generatedNumber(req.IfName); ok {
		for _, att := range shiftedCandidates(req, s.agent.PodAttachments(req.Pod.Namespace, req.Pod.Name)) {
			keys = append(keys, att.Namespace+"/"+att.Name)
		}
	}
	seen := map[string]bool{}
	for _, key := range keys {
		if seen[key] {
			continue
		}
		seen[key] = true
		s.sandboxes.forget(key, req.ContainerID)
		att, exists := s.agent.CachedAttachment(key)
		if !exists {
			continue // its port went with it
		}
		addr, ok := s.agent.Address(att)
		if !ok {
			continue
		}
		p := &podPlug{key: key, addr: addr, owner: plugOwner(req), veth: &veth{hostNetns: s.cfg.HostNetns, hostName: addr.InterfaceName()}, pod: podOwned(att)}
		unplugged, err := s.unplug(ctx, p)
		if err != nil {
			logger.Error(err, "Unplugging the pod's interface failed", "attachment", key)
		}
		if unplugged || err != nil {
			return
		}
	}
}

// unplug takes the plug's port off the switch if the plug's owner still
// owns it, and gives a plain attachment an internal port again if the
// agent holds it as local; a pod's attachment gets none. unplugged says
// that the port was the plug owner's.
func (s *Server) unplug(ctx context.Context, p *podPlug) (unplugged bool, err error) {
	release, notHeld := s.agent.Hold(p.addr, p.key)
	defer release()
	plugs, err := s.ports.Plugs(ctx, p.addr)
	if err != nil {
		return false, fmt.Errorf("reading the attachment's port: %w", err)
	}
	if !slices.ContainsFunc(plugs, func(pl fabric.Plug) bool { return pl.Owner == p.owner }) {
		klog.FromContext(ctx).V(2).Info("The port is not the sandbox's; leaving it", "attachment", p.key, "plugs", plugs)
		return false, nil
	}
	// A plain attachment the agent still holds gets an internal port
	// back, whose CreateLocal replaces the flows: only the port goes
	// first.
	if notHeld == nil && !p.pod {
		if err := s.ports.DeletePorts(ctx, p.addr); err != nil {
			s.agent.Lost(p.addr, p.key)
			return true, fmt.Errorf("taking the pod's port off the switch: %w", err)
		}
		s.restorePort(ctx, p)
	} else {
		if err := s.ports.DeleteLocal(ctx, p.addr); err != nil {
			s.agent.Lost(p.addr, p.key)
			return true, fmt.Errorf("taking the pod's port off the switch: %w", err)
		}
		if _, err := deleteHostEnd(p.veth.hostNetns, p.veth.hostName); err != nil {
			return true, fmt.Errorf("deleting the pod's veth: %w", err)
		}
	}
	klog.FromContext(ctx).V(2).Info("Unplugged a pod's interface", "attachment", p.key, "address", p.addr)
	return true, nil
}

// check checks that a sandbox's interface is as its ADD left it: the
// attachment ready, its port the sandbox's, and the pod's end of the veth
// pair with the attachment's MAC address, address and MTU.
func (s *Server) check(ctx context.Context, req *cni.Request) *types.Error {
	if req.ContainerID == "" || req.IfName == "" || req.Netns == "" || req.Pod.Namespace == "" || req.Pod.Name == "" {
		return cniError(types.ErrInvalidEnvironmentVariables, "CHECK needs a container ID, an interface name, a network namespace and the pod (K8S_POD_NAMESPACE and K8S_POD_NAME)")
	}
	att, why := s.podAttachment(req)
	if att == nil {
		return cniError(types.ErrInternal, "%s", why)
	}
	addr, ok := s.agent.Address(att)
	if !ok {
		return cniError(types.ErrInternal, "NetworkAttachment %s has no address", cache.MetaObjectToName(att).String())
	}
	if why := s.agent.NotReady(att, addr); why != "" {
		return cniError(types.ErrInternal, "%s", why)
	}
	prefix, cniErr := s.subnetPrefix(ctx, req.Pod.Namespace, att.Spec.Subnet)
	if cniErr != nil {
		return cniErr
	}
	p := s.podPlugOf(ctx, req, cache.MetaObjectToName(att).String(), addr, prefix)
	plugs, err := s.ports.Plugs(ctx, addr)
	if err != nil {
		return cniError(types.ErrTryAgainLater, "reading the port of NetworkAttachment %s: %v", p.key, err)
	}
	if !slices.ContainsFunc(plugs, func(pl fabric.Plug) bool { return pl.Owner == p.owner }) {
		return cniError(types.ErrInternal, "the port of NetworkAttachment %s is not interface %s of container %s (plugs: %v)", p.key, req.IfName, req.ContainerID, plugs)
	}
	if err := p.veth.check(); err != nil {
		return cniError(types.ErrInternal, "interface %s of pod %s: %v", req.IfName, req.Pod, err)
	}
	if err := checkPrevResult(req.PrevResult, p.veth.addr); err != nil {
		return cniError(types.ErrInternal, "interface %s of pod %s: %v", req.IfName, req.Pod, err)
	}
	return nil
}

// checkPrevResult returns an error when the result of the ADD being
// checked gave the pod another address than it has.
func checkPrevResult(raw json.RawMessage, addr netip.Prefix) error {
	if len(raw) == 0 {
		return nil
	}
	prev, err := types100.NewResult(raw)
	if err != nil {
		return fmt.Errorf("decoding the previous result: %w", err)
	}
	res, err := types100.NewResultFromResult(prev)
	if err != nil {
		return fmt.Errorf("reading the previous result: %w", err)
	}
	for _, ip := range res.IPs {
		ones, _ := ip.Address.Mask.Size()
		if got, ok := netip.AddrFromSlice(ip.Address.IP); ok && netip.PrefixFrom(got.Unmap(), ones) == addr {
			return nil
		}
	}
	return fmt.Errorf("the previous result does not hold address %s", addr)
}

package cniserver

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"

	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/cni"
	"github.com/kos-sdn/kos/components/fabric"
)

// sandboxes remembers the live sandboxes the server plugged, by attachment
// key, so that a sandbox whose attachment is deleted and comes back (made
// again for the same pod) is plugged again: the request of its ADD, and
// the sandbox's network namespace, held open, since the path the runtime
// named may not be reachable from the agent. A DEL forgets its sandbox; an
// agent restart forgets them all.
type sandboxes struct {
	mu sync.Mutex
	// byKey holds the sandboxes by the key of their attachment.
	byKey map[string]*sandbox
}

// sandbox is one plugged sandbox.
type sandbox struct {
	req   cni.Request
	netns *os.File
}

// remember records the sandbox of a successful ADD for attachment key,
// replacing an earlier one, and holds its network namespace open.
func (s *sandboxes) remember(ctx context.Context, key string, req *cni.Request) {
	netns, err := os.Open(cni.NetnsPath(ctx, req.Netns))
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Not remembering a sandbox: its network namespace does not open", "attachment", key, "err", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byKey == nil {
		s.byKey = map[string]*sandbox{}
	}
	if old := s.byKey[key]; old != nil {
		old.netns.Close()
	}
	r := *req
	r.PrevResult = nil
	s.byKey[key] = &sandbox{req: r, netns: netns}
}

// forget drops the sandbox of attachment key if it is containerID's.
func (s *sandboxes) forget(key, containerID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.byKey[key]; sb != nil && sb.req.ContainerID == containerID {
		sb.netns.Close()
		delete(s.byKey, key)
	}
}

// keyOf returns the key of the attachment the server plugged interface
// ifname of sandbox containerID for, if it remembers one.
func (s *sandboxes) keyOf(containerID, ifname string) (string, bool) {
	if containerID == "" {
		return "", false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, sb := range s.byKey {
		if sb.req.ContainerID == containerID && sb.req.IfName == ifname {
			return key, true
		}
	}
	return "", false
}

// pluggedFor returns the sandbox (container ID) and interface the server
// last plugged attachment key for, if it remembers one.
func (s *sandboxes) pluggedFor(key string) (containerID, ifname string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.byKey[key]
	if sb == nil {
		return "", "", false
	}
	return sb.req.ContainerID, sb.req.IfName, true
}

// get returns the request that plugs the sandbox of attachment key again,
// if the server remembers one, with its network namespace open on a
// descriptor of its own that the caller closes, so that a DEL meanwhile
// closes nothing the plug uses.
func (s *sandboxes) get(key string) (cni.Request, *os.File, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.byKey[key]
	if sb == nil {
		return cni.Request{}, nil, false
	}
	netns, err := os.Open(fmt.Sprintf("/proc/self/fd/%d", sb.netns.Fd()))
	if err != nil {
		return cni.Request{}, nil, false
	}
	req := sb.req
	req.Netns = fmt.Sprintf("/proc/self/fd/%d", netns.Fd())
	return req, netns, true
}

// Replug plugs again the live sandbox of a pod's attachment that the
// switch just took up (as after the attachment was deleted and made
// again for the same pod), if the server plugged that sandbox before and
// its port is not on the switch. It returns at once; the plug runs on its
// own until it is done or ctx ends, waiting for the attachment to be
// ready as an ADD does.
func (s *Server) Replug(ctx context.Context, att *v1alpha1.NetworkAttachment) {
	key := att.Namespace + "/" + att.Name
	req, netns, ok := s.sandboxes.get(key)
	if !ok {
		return
	}
	logger := klog.FromContext(ctx).WithValues("attachment", key, "pod", req.Pod.String(), "containerID", req.ContainerID)
	if uid := att.Labels[v1alpha1.PodUIDLabel]; uid == "" || uid != req.Pod.UID {
		// Another pod's attachment now, or none's: the sandbox is no
		// longer this attachment's.
		netns.Close()
		s.sandboxes.forget(key, req.ContainerID)
		return
	}
	go func() {
		defer netns.Close()
		ctx := context.WithValue(klog.NewContext(ctx, logger), replugKey{}, true)
		if addr, ok := s.agent.Address(att); ok {
			plugs, err := s.ports.Plugs(ctx, addr)
			if err == nil && slices.ContainsFunc(plugs, func(pl fabric.Plug) bool { return pl.Owner == plugOwner(&req) }) {
				return
			}
		}
		if _, cniErr := s.add(ctx, &req); cniErr != nil {
			logger.Info("Plugging a pod's sandbox again failed", "err", cniErr.Msg)
			return
		}
		logger.Info("Plugged a pod's sandbox again, its attachment back")
	}()
}

// stale returns the keys of the sandboxes plugged for network (by the
// name and subnet of its configuration) whose interface valid does not
// name.
func (s *sandboxes) stale(network, subnet string, valid []cni.Attachment) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for key, sb := range s.byKey {
		if sb.req.Network != network || sb.req.Subnet != subnet {
			continue
		}
		if !slices.Contains(valid, cni.Attachment{ContainerID: sb.req.ContainerID, IfName: sb.req.IfName}) {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	return keys
}

// gc releases what the server plugged for a GC's network and no valid
// attachment names, as a DEL of each would: the pod's interface, if its
// namespace is still there, and the port. What it never plugged since it
// started is not its to release: the attachments go with their pods, and
// the agent sweeps veths that no attachment holds.
func (s *Server) gc(ctx context.Context, req *cni.Request) {
	for _, key := range s.sandboxes.stale(req.Network, req.Subnet, req.Valid) {
		r, netns, ok := s.sandboxes.get(key)
		if !ok {
			continue
		}
		klog.FromContext(ctx).Info("Releasing a sandbox no valid attachment names", "attachment", key, "containerID", r.ContainerID, "ifname", r.IfName)
		r.Command = cni.CommandDel
		s.del(ctx, &r)
		netns.Close()
	}
}

package agent_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/fabric/logging"
	"github.com/kos-sdn/kos/components/fabric/ovs"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/tools/ovsenv"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// appliedMTU is the overlay MTU the tests' NetworkConfig applies: other
// than the 1450 the agents choose on their own, so that a test tells them
// apart.
const appliedMTU = 1400

// applyNetworkConfig makes the NetworkConfig "cluster" apply overlay MTU
// mtu, as kos-controller-manager would, which these tests do not run. Tests
// of other packages' processes do not see this kos-apiserver; those of this
// package that do leave Config.NetworkConfig off.
func applyNetworkConfig(t *testing.T, mtu int32) {
	t.Helper()
	applyNetworkConfigPort(t, mtu, v1alpha1.DefaultTunnelPort)
}

// applyNetworkConfigPort makes the NetworkConfig "cluster" apply overlay
// MTU mtu and tunnel port port.
func applyNetworkConfigPort(t *testing.T, mtu, port int32) {
	t.Helper()
	// Not t.Context(): a cleanup calls it too, after that is done.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := kosClient(t).NetworkV1alpha1().NetworkConfigs()
	cfg, err := c.Get(ctx, v1alpha1.NetworkConfigName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cfg, err = c.Create(ctx, &v1alpha1.NetworkConfig{
			ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.NetworkConfigName},
			Spec:       v1alpha1.NetworkConfigSpec{OverlayMTU: ptr.To(mtu), TunnelPort: ptr.To[int32](v1alpha1.DefaultTunnelPort)},
		}, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatalf("making the NetworkConfig: %v", err)
	}
	cfg.Status.OverlayMTU, cfg.Status.TunnelPort = mtu, port
	if _, err := c.UpdateStatus(ctx, cfg, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("applying overlay MTU %d: %v", mtu, err)
	}
}

// mainClient returns an admin client of the main cluster.
func mainClient(t *testing.T) *kubernetes.Clientset {
	t.Helper()
	kube, err := kubernetes.NewForConfig(testenv.Shared(t).RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	return kube
}

// makeNode creates a Node object of that name in the main cluster, as a
// kubelet would register it.
func makeNode(t *testing.T, kube kubernetes.Interface, name string) {
	t.Helper()
	if _, err := kube.CoreV1().Nodes().Create(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating node %s: %v", name, err)
	}
	t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// underlayAnnotation returns a check that a Node's underlay annotation is
// want.
func underlayAnnotation(kube kubernetes.Interface, node, want string) func(context.Context) error {
	return func(ctx context.Context) error {
		n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := n.Annotations[v1alpha1.UnderlayMTUAnnotation]; got != want {
			return fmt.Errorf("node %s: annotation %s is %q, want %q", node, v1alpha1.UnderlayMTUAnnotation, got, want)
		}
		return nil
	}
}

// tunnelDstPort returns a check that the tunnel port of the OVS in inst
// sends and receives on UDP port want.
func tunnelDstPort(inst *ovsenv.Instance, want int) func(context.Context) error {
	return func(ctx context.Context) error {
		got, err := inst.Run(ctx, "ovs-vsctl", "get", "Interface", ovs.TunnelPort, "options:dst_port")
		if err != nil {
			return err
		}
		if strings.Trim(got, `"`) != strconv.Itoa(want) {
			return fmt.Errorf("options:dst_port of %s is %s, want %d", ovs.TunnelPort, got, want)
		}
		return nil
	}
}

// TestIntegrationNetworkConfigMTU runs an agent on OVS whose own MTU is
// 1450 (a 1500-byte underlay) while the NetworkConfig applies 1400 and
// tunnel port 4790: the interface of a new attachment gets 1400, asked of
// OVS, on the device and in status.mtu, the tunnel port is made on 4790,
// and the agent reports its underlay on its Node. Then the NetworkConfig
// applies another MTU, which the next new interface gets, and another
// tunnel port, to which the running agent moves the tunnel.
func TestIntegrationNetworkConfigMTU(t *testing.T) {
	k := newAPI(t)
	const vni = 241
	k.subnet("s1", "10.241.0.0/24", vni)
	const appliedPort, changedPort = 4790, 4791
	applyNetworkConfigPort(t, appliedMTU, appliedPort)
	// Other tests share the API: leave them VXLAN's port.
	t.Cleanup(func() { applyNetworkConfig(t, appliedMTU) })
	kube := mainClient(t)
	node := k.node("a")
	makeNode(t, kube, node)

	inst, fab := startOVS(t)
	cfg := agentConfig(t, node, hostA, fab)
	cfg.NetworkConfig, cfg.UnderlayMTU, cfg.Nodes = true, 1500, kube.CoreV1().Nodes()
	r := startAgent(t, cfg)

	k.attachment("a1", node, "s1")
	k.address("a1", "10.241.0.5", vni)
	poll.Until(t, settle, "a1 is ready", k.ready("a1", hostA))
	poll.Until(t, settle, "a1 has the applied MTU", k.hasMTU(inst, "a1", appliedMTU))
	poll.Until(t, settle, "the node reports its underlay", underlayAnnotation(kube, node, "1500"))
	poll.Until(t, settle, "the tunnel is on the applied port", tunnelDstPort(inst, appliedPort))

	// A forced change of the overlay MTU and the tunnel port reaches the
	// running agent: the next new interface gets the MTU, and the tunnel
	// moves.
	const changed = appliedMTU - 50
	applyNetworkConfigPort(t, changed, changedPort)
	poll.Until(t, settle, "the tunnel moved to the changed port", tunnelDstPort(inst, changedPort))
	poll.Until(t, settle, "the agent uses the changed MTU", func(context.Context) error {
		if got := r.agent.MTU(); got != changed {
			return fmt.Errorf("the agent's MTU is %d, want %d", got, changed)
		}
		return nil
	})
	k.attachment("a2", node, "s1")
	k.address("a2", "10.241.0.6", vni)
	poll.Until(t, settle, "a2 is ready", k.ready("a2", hostA))
	poll.Until(t, settle, "a2 has the changed MTU", k.hasMTU(inst, "a2", changed))
}

// TestIntegrationNetworkConfigForbidden runs an agent with the rights of
// 0.3.0's manifest, which grants none to networkconfigs nor to patch
// Nodes: it makes the interface of a new attachment with its own MTU, 1450,
// not the 1400 the NetworkConfig applies, and leaves the Node alone.
func TestIntegrationNetworkConfigForbidden(t *testing.T) {
	k := newAPI(t)
	const vni = 242
	k.subnet("s1", "10.242.0.0/24", vni)
	applyNetworkConfig(t, appliedMTU)
	kube := mainClient(t)
	node := k.node("a")
	makeNode(t, kube, node)

	// A user with the agent's rights to attachments and nothing else.
	user := "kos-agent-" + k.ns
	name := user
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{v1alpha1.SchemeGroupVersion.Group}, Resources: []string{"networkattachments"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{v1alpha1.SchemeGroupVersion.Group}, Resources: []string{"networkattachments/status"}, Verbs: []string{"update", "patch"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	if _, err := kube.RbacV1().ClusterRoles().Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = kube.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	asAgent := func(cfg *rest.Config) *rest.Config {
		cfg = rest.CopyConfig(cfg)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		return cfg
	}
	agentKOS, err := kosclient.NewForConfig(asAgent(directConfig(t)))
	if err != nil {
		t.Fatal(err)
	}
	agentKube, err := kubernetes.NewForConfig(asAgent(testenv.Shared(t).RESTConfig))
	if err != nil {
		t.Fatal(err)
	}
	// The rights are the kube-apiserver's, which kos-apiserver asks: make
	// sure they hold before the agent starts.
	poll.Until(t, settle, "the agent's user may list attachments but not networkconfigs", func(ctx context.Context) error {
		if _, err := agentKOS.NetworkV1alpha1().NetworkAttachments(k.ns).List(ctx, metav1.ListOptions{}); err != nil {
			return err
		}
		if _, err := agentKOS.NetworkV1alpha1().NetworkConfigs().Get(ctx, v1alpha1.NetworkConfigName, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			return fmt.Errorf("reading the NetworkConfig: err = %v, want Forbidden", err)
		}
		return nil
	})

	fab := logging.New()
	fab.SetMTU(testMTU)
	cfg := agentConfig(t, node, hostA, fab)
	cfg.Client = agentKOS
	cfg.NetworkConfig, cfg.UnderlayMTU, cfg.Nodes = true, 1500, agentKube.CoreV1().Nodes()
	r := startAgent(t, cfg)

	k.attachment("a1", node, "s1")
	k.address("a1", "10.242.0.5", vni)
	poll.Until(t, settle, "a1 is ready", k.ready("a1", hostA))
	if got := k.get("a1").Status.MTU; got != testMTU {
		t.Errorf("status.mtu of a1 is %d, want the agent's own %d", got, testMTU)
	}
	if got := r.agent.MTU(); got != testMTU {
		t.Errorf("the agent's MTU is %d, want its own %d", got, testMTU)
	}
	if err := underlayAnnotation(kube, node, "")(t.Context()); err != nil {
		t.Errorf("the agent, which may not patch Nodes, changed its Node: %v", err)
	}
}

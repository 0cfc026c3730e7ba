package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkv1alpha1 "github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/kubectlkos"
	"github.com/kos-sdn/kos/tools/addons/release"
	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// kubectlKOSNamespace holds the test's subnet and attachments.
const kubectlKOSNamespace = "e2e-kubectl-kos"

// kubectlKOS is the plugin test's state.
type kubectlKOS struct {
	*standard
	// pluginDir holds the built kubectl-kos, for the PATH.
	pluginDir string
	// attachments are the test's, by node.
	attachments map[string]*networkv1alpha1.NetworkAttachment
}

// testInstall grants the troubleshooters' rights on the shared cluster,
// where the release is installed from disk (installFromTree), and builds
// the plugin.
func (kk *kubectlKOS) testInstall(t *testing.T) {
	kk.kubectl(t, "apply", "-f", filepath.Join(kk.root, "docs", "kubectl-kos-rbac.yaml"))
	// kubectl finds plugins on the PATH by their file name.
	built := testenv.Build(t, "cmd/kubectl-kos")
	kk.pluginDir = kk.t.TempDir()
	data, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(kk.pluginDir, "kubectl-kos"), data, 0o755); err != nil {
		t.Fatal(err)
	}
}

// installFromTree pushes today's images to the cluster's registry, writes
// the release tree for it, installs it from disk with the userspace agent,
// and waits for KOS to be ready. It returns the channels it applied.
func (s *standard) installFromTree(t *testing.T) []string {
	return s.installTreeInto(t, s.t.TempDir())
}

// installTreeInto is installFromTree with the release tree written in dir,
// which must outlive the channels' use.
func (s *standard) installTreeInto(t *testing.T, dir string) []string {
	ctx := t.Context()
	began := time.Now()
	repo := s.env.Registry + "/" + registryPrefix
	pushed := s.pushImages(t, repo)
	tree := filepath.Join(dir, "release")
	if _, err := release.Write(ctx, release.Options{Root: s.root, Out: tree, Registry: repo, Digests: pushed}); err != nil {
		t.Fatalf("writing the release tree: %v", err)
	}
	userspace, err := kosinstall.WriteUserspaceAgentChannel(tree)
	if err != nil {
		t.Fatal(err)
	}
	s.provideVolumes(t)
	channels := []string{filepath.Join(tree, userspace), filepath.Join(tree, "bootstrap-channel.yaml")}
	s.channelsCLI(t, append(append([]string{"apply", "channel"}, channels...), "--yes")...)
	s.waitKOSReady(t, 6*time.Minute)
	figures.Duration(t, "install-to-available", time.Since(began))
	return channels
}

// testAttachments makes a subnet and one attachment on every node, and
// waits until every one is Ready.
func (kk *kubectlKOS) testAttachments(t *testing.T) {
	ctx := t.Context()
	kk.namespace(t, kubectlKOSNamespace)
	subnet := &networkv1alpha1.Subnet{
		ObjectMeta: metav1.ObjectMeta{Name: "blue"},
		Spec:       networkv1alpha1.SubnetSpec{IPv4: "10.252.0.0/24", VNI: 4201},
	}
	if _, err := kk.network.NetworkV1alpha1().Subnets(kubectlKOSNamespace).Create(ctx, subnet, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, n := range kk.env.Nodes {
		att := &networkv1alpha1.NetworkAttachment{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("a-%d", i+1)},
			Spec:       networkv1alpha1.NetworkAttachmentSpec{Node: n.Name, Subnet: subnet.Name},
		}
		if _, err := kk.network.NetworkV1alpha1().NetworkAttachments(kubectlKOSNamespace).Create(ctx, att, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 2*time.Minute, "every attachment to be Ready", func(ctx context.Context) error {
		list, err := kk.network.NetworkV1alpha1().NetworkAttachments(kubectlKOSNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		kk.attachments = map[string]*networkv1alpha1.NetworkAttachment{}
		for i := range list.Items {
			a := &list.Items[i]
			if !meta.IsStatusConditionTrue(a.Status.Conditions, networkv1alpha1.NetworkAttachmentReady) || a.Status.HostIP == "" {
				return fmt.Errorf("attachment %s is not Ready: %+v", a.Name, a.Status.Conditions)
			}
			kk.attachments[a.Spec.Node] = a
		}
		if len(kk.attachments) != len(kk.env.Nodes) {
			return fmt.Errorf("%d attachments, want one on each of %d nodes", len(kk.attachments), len(kk.env.Nodes))
		}
		return nil
	})
}

// troubleshooter are the flags that make the plugin act as a member of the
// group docs/kubectl-kos-rbac.yaml grants its rights to.
var troubleshooter = []string{"--as", "e2e-troubleshooter", "--as-group", "kos-troubleshooters"}

// plugin runs `kubectl kos ARGS...` as the troubleshooter, and returns its
// standard output and error and its exit code.
func (kk *kubectlKOS) plugin(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	// kubectl passes the plugin the arguments after its name, and its
	// environment: the kubeconfig goes by KUBECONFIG.
	cmd := exec.CommandContext(t.Context(), "kubectl", append([]string{"kos"}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kk.env.Kubeconfig, "PATH="+kk.pluginDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code = cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		t.Fatalf("kubectl kos %s: %v", strings.Join(args, " "), err)
	}
	t.Logf("kubectl kos %s: exit %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	return out.String(), errOut.String(), code
}

// mustPlugin is plugin that fails the test unless the plugin succeeds.
func (kk *kubectlKOS) mustPlugin(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := kk.plugin(t, append(args, troubleshooter...)...)
	if code != 0 {
		t.Fatalf("kubectl kos %s: exit code %d: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// testStatus checks the control plane's rows (every pod Ready, one etcd
// leader, databases under their quota, the APIService Available, the
// certificates kos-pki keeps far from expiry) and every node's row: the
// agent ready, its attachment and the other two nodes' on its switch,
// flows, a reconcile, no errors.
func (kk *kubectlKOS) testStatus(t *testing.T) {
	help, _, code := kk.plugin(t, "--help")
	if code != 0 || !strings.Contains(help, "kubectl kos [command]") {
		t.Errorf("kubectl kos --help: exit %d:\n%s", code, help)
	}
	table := kk.mustPlugin(t, "status", "--control-plane=false")
	if !strings.HasPrefix(table, "NODE ") || strings.Count(table, "\n") != len(kk.env.Nodes)+1 {
		t.Errorf("kubectl kos status: want a header and a row per node:\n%s", table)
	}
	table = kk.mustPlugin(t, "status")
	if !strings.HasPrefix(table, "COMPONENT ") || !strings.Contains(table, "\n\nNODE ") {
		t.Errorf("kubectl kos status: want the control plane's table, then the nodes':\n%s", table)
	}
	kk.checkControlPlane(t)
	// The health checks of a healthy cluster all pass, exit code 0.
	checks := kk.mustPlugin(t, "check", "--no-headers", "--skip-datapath")
	if n := strings.Count(checks, "\n"); n < 9 || strings.Contains(checks, "FAIL") {
		t.Errorf("kubectl kos check: want nine checks or more, none failed:\n%s", checks)
	}
	var list struct {
		Items []kubectlkos.NodeStatus `json:"items"`
	}
	// Each agent syncs its remote attachments on its own: wait for all.
	poll.Until(t, time.Minute, "every agent to hold the three attachments", func(context.Context) error {
		out := kk.mustPlugin(t, "status", "-o", "json", "--control-plane=false")
		list.Items = nil
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			return err
		}
		for _, st := range list.Items {
			if st.Agent == nil || st.Agent.Local != 1 || st.Agent.Remote != len(kk.env.Nodes)-1 {
				return fmt.Errorf("node %s: agent %+v, error %q: want one local and %d remote attachments", st.Node, st.Agent, st.Error, len(kk.env.Nodes)-1)
			}
		}
		return nil
	})
	if len(list.Items) != len(kk.env.Nodes) {
		t.Fatalf("%d nodes in the status, want %d", len(list.Items), len(kk.env.Nodes))
	}
	for _, st := range list.Items {
		a := st.Agent
		switch {
		case !a.Ready || len(a.Errors) > 0 || st.Error != "":
			t.Errorf("node %s: ready %t, errors %q %q", st.Node, a.Ready, a.Errors, st.Error)
		case a.Node != st.Node || a.HostIP != kk.attachments[st.Node].Status.HostIP:
			t.Errorf("node %s: the agent says node %s at %s, want %s", st.Node, a.Node, a.HostIP, kk.attachments[st.Node].Status.HostIP)
		case a.Flows < 4+4+3*(len(kk.env.Nodes)-1):
			t.Errorf("node %s: %d flows, want at least the default, local and remote ones", st.Node, a.Flows)
		case a.LastReconcile.IsZero() || a.LastCheck.IsZero():
			t.Errorf("node %s: no reconcile or check: %+v", st.Node, a)
		case st.Version == "" || st.NotReady == nil || *st.NotReady != 0 || *st.Attachments != 1:
			t.Errorf("node %s: version %q, attachments %v not ready of %v: want a version and the one attachment Ready", st.Node, st.Version, st.NotReady, st.Attachments)
		}
	}
}

// checkControlPlane reads status's control-plane rows (-o json) and checks
// them against the standard release: two kos-apiservers, three etcd
// members of which one leads, a controller manager and kos-pki, all Ready;
// the APIService Available; kos-pki's certificates valid for over 21 days.
func (kk *kubectlKOS) checkControlPlane(t *testing.T) {
	var list struct {
		Items []struct {
			Kind string `json:"kind"`
			kubectlkos.ComponentStatus
		} `json:"items"`
	}
	out := kk.mustPlugin(t, "status", "-o", "json")
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	leaders := 0
	for _, it := range list.Items {
		c := it.ComponentStatus
		if it.Kind != "ComponentStatus" {
			continue
		}
		count[c.Component]++
		if !c.Ready || c.Error != "" {
			t.Errorf("%s %s: ready %t, error %q", c.Component, c.Name, c.Ready, c.Error)
		}
		switch c.Component {
		case "kos-etcd":
			if c.Leader == nil || c.DBSize == nil || c.DBQuota == nil || *c.DBSize <= 0 || *c.DBSize >= *c.DBQuota || c.Version == "" {
				t.Errorf("etcd member %s: leader %v, database %v of %v, version %q: want its role, a database under its quota and etcd's version", c.Name, c.Leader, c.DBSize, c.DBQuota, c.Version)
			} else if *c.Leader {
				leaders++
			}
		case "certificate":
			if c.Expires == nil || time.Until(c.Expires.Time) < 21*24*time.Hour {
				t.Errorf("certificate %s: expires %v", c.Name, c.Expires)
			}
		}
	}
	for component, want := range map[string]int{"kos-apiserver": 2, "kos-etcd": 3, "kos-pki": 1, "apiservice": 1} {
		if count[component] != want {
			t.Errorf("%d rows of %s, want %d", count[component], component, want)
		}
	}
	// The controller managers, and the CA and leaves kos-pki keeps (etcd's
	// server, peer and client pairs, kos-apiserver's serving pair).
	if count["kos-controller-manager"] < 1 || count["certificate"] < 4 {
		t.Errorf("rows by component %v: want a controller manager and at least four certificates", count)
	}
	if leaders != 1 {
		t.Errorf("%d etcd members say they lead, want 1", leaders)
	}
}

// testTrace traces a ping from the first node's attachment to the
// second's, which leaves by the tunnel towards the second node, and to an
// address nobody holds, which is dropped.
func (kk *kubectlKOS) testTrace(t *testing.T) {
	from := kk.attachments[kk.env.Nodes[0].Name]
	to := kk.attachments[kk.env.Nodes[1].Name]
	out := kk.mustPlugin(t, "trace", from.Name, "--to", to.Status.IPv4, "-n", kubectlKOSNamespace)
	for _, want := range []string{"on node " + from.Spec.Node, "set_field:" + to.Status.HostIP + "->tun_dst", "Datapath actions:"} {
		if !strings.Contains(out, want) {
			t.Errorf("the trace to %s does not say %q", to.Status.IPv4, want)
		}
	}
	out = kk.mustPlugin(t, "trace", from.Name, "--to", "10.252.0.250", "--protocol", "tcp", "--port", "80", "-n", kubectlKOSNamespace)
	if !strings.Contains(out, "Datapath actions: drop") {
		t.Errorf("the trace to an address nobody holds is not dropped")
	}
}

// testSupportBundle writes a bundle of every namespace (-A) and checks
// that it holds every node's files, the control plane's and the test
// namespace's objects, and that nothing failed.
func (kk *kubectlKOS) testSupportBundle(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bundle.tar.gz")
	kk.mustPlugin(t, "support-bundle", "-A", "--since", "1h", "-o", file)
	files := tarGzFiles(t, file)
	var want []string
	for _, n := range kk.env.Nodes {
		for _, f := range []string{"status.json", "flows.txt", "tunnels.txt", "routes.txt", "logs/kos-agent.log", "logs/ovs.log"} {
			want = append(want, "nodes/"+n.Name+"/"+f)
		}
	}
	want = append(want, "agents/pods.yaml", "namespaces/"+kubectlKOSNamespace+"/networkattachments.yaml", "namespaces/"+kubectlKOSNamespace+"/subnets.yaml", "namespaces/"+kubectlKOSNamespace+"/events.yaml",
		"control-plane/pods.yaml", "control-plane/status.json", "control-plane/apiservice.yaml")
	logs := 0
	for name := range files {
		if strings.HasPrefix(name, "control-plane/") && strings.HasSuffix(name, ".log") {
			logs++
		}
	}
	// Two kos-apiservers, three etcd members, kos-pki, the controller
	// managers: a log each at least.
	if logs < 7 {
		t.Errorf("the bundle holds %d control-plane logs, want one per control-plane container", logs)
	}
	for _, name := range want {
		if files[name] == "" {
			t.Errorf("the bundle has no %s (or it is empty)", name)
		}
	}
	if errs, ok := files["errors.txt"]; ok {
		t.Errorf("the bundle could not collect everything:\n%s", errs)
	}
	first := kk.env.Nodes[0].Name
	for name, want := range map[string]string{
		"nodes/" + first + "/flows.txt":                                  "tun_dst",
		"nodes/" + first + "/tunnels.txt":                                "remote_ip=flow",
		"nodes/" + first + "/routes.txt":                                 "# ovs-appctl ovs/route/show",
		"namespaces/" + kubectlKOSNamespace + "/networkattachments.yaml": "name: a-1",
	} {
		if !strings.Contains(files[name], want) {
			t.Errorf("%s does not say %q:\n%s", name, want, files[name])
		}
	}
}

// testForbidden runs the commands as a user without the troubleshooters'
// rights: each fails, saying so.
func (kk *kubectlKOS) testForbidden(t *testing.T) {
	from := kk.attachments[kk.env.Nodes[0].Name]
	for _, args := range [][]string{
		{"status"},
		{"check"},
		{"trace", from.Name, "--to", "10.252.0.250", "-n", kubectlKOSNamespace},
		{"support-bundle", "-n", kubectlKOSNamespace, "-o", filepath.Join(t.TempDir(), "b.tar.gz")},
	} {
		_, errOut, code := kk.plugin(t, append(args, "--as", "e2e-nobody")...)
		if code != 1 || !strings.Contains(errOut, "forbidden") {
			t.Errorf("kubectl kos %s as a user without rights: exit %d, %q; want 1 and forbidden", strings.Join(args, " "), code, errOut)
		}
	}
}

// tarGzFiles returns the regular files of a gzipped tar, by name below its
// top folder.
func tarGzFiles(t *testing.T, file string) map[string]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		_, name, _ := strings.Cut(h.Name, "/")
		files[name] = string(data)
	}
}

// checkNamespace is where docs/kubectl-kos-rbac.yaml lets the
// troubleshooters make check's scratch network.
const checkNamespace = "kos-check"

// testCheckDatapath runs check's datapath part as a troubleshooter: on the
// healthy cluster every ordered pair of nodes passes ping, full-size ping
// and TCP; with one node's tunnel blocked (a drop of the tunnel port on
// its underlay bridge, in front of the agent's own filter) check exits 1
// and names every pair of that node and no other; and neither run leaves
// an object behind. Agents that serve no probes have the part skipped:
// the step then checks only that check says so and passes.
func (kk *kubectlKOS) testCheckDatapath(t *testing.T) {
	nodes := len(kk.env.Nodes)
	out, errOut, code := kk.plugin(t, append([]string{"check", "-n", checkNamespace, "--no-headers"}, troubleshooter...)...)
	if code != 0 {
		t.Fatalf("kubectl kos check -n %s on a healthy cluster: exit %d: %s", checkNamespace, code, errOut)
	}
	row := checkRow(out, "datapath")
	switch {
	case row == nil:
		t.Fatalf("kubectl kos check: no datapath row:\n%s", out)
	case row[1] == "skip":
		t.Logf("the agents serve no probes: the datapath part was skipped (%s)", strings.Join(row[2:], " "))
		kk.checkNoScratch(t)
		return
	case row[1] != "ok":
		t.Fatalf("kubectl kos check: datapath %v on a healthy cluster", row)
	}
	// Ten checks, then ping, full-size ping and TCP of each ordered pair.
	if got, want := strings.Count(out, " ok "), 10+3*nodes*(nodes-1); got < want {
		t.Errorf("kubectl kos check: %d ok cells, want %d (10 checks, %d pairs):\n%s", got, want, nodes*(nodes-1), out)
	}
	kk.checkNoScratch(t)

	blocked := kk.env.Nodes[len(kk.env.Nodes)-1]
	unblock := blockTunnel(t, blocked)
	_, errOut, code = kk.plugin(t, append([]string{"check", "-n", checkNamespace, "--timeout", "3m"}, troubleshooter...)...)
	unblock()
	if code != 1 {
		t.Errorf("kubectl kos check with node %s's tunnel blocked: exit %d, want 1", blocked.Name, code)
	}
	for _, n := range kk.env.Nodes {
		if n == blocked {
			continue
		}
		for _, pair := range []string{n.Name + " → " + blocked.Name, blocked.Name + " → " + n.Name} {
			if !strings.Contains(errOut, pair) {
				t.Errorf("kubectl kos check with node %s's tunnel blocked does not name pair %s: %s", blocked.Name, pair, errOut)
			}
		}
		for _, m := range kk.env.Nodes {
			if m != blocked && m != n && strings.Contains(errOut, n.Name+" → "+m.Name) {
				t.Errorf("kubectl kos check names pair %s → %s, which does not cross node %s: %s", n.Name, m.Name, blocked.Name, errOut)
			}
		}
	}
	kk.checkNoScratch(t)
}

// checkRow returns the fields of the row of check in check's table.
func checkRow(table, check string) []string {
	for line := range strings.SplitSeq(table, "\n") {
		if rest, ok := strings.CutPrefix(line, check+" "); ok {
			return append([]string{check}, strings.Fields(rest)...)
		}
	}
	return nil
}

// checkNoScratch fails the test if check left a Subnet or an attachment
// of its scratch network behind.
func (kk *kubectlKOS) checkNoScratch(t *testing.T) {
	t.Helper()
	selector := metav1.ListOptions{LabelSelector: "kos.example.com/check"}
	subnets, err := kk.network.NetworkV1alpha1().Subnets(metav1.NamespaceAll).List(t.Context(), selector)
	if err != nil {
		t.Fatal(err)
	}
	atts, err := kk.network.NetworkV1alpha1().NetworkAttachments(metav1.NamespaceAll).List(t.Context(), selector)
	if err != nil {
		t.Fatal(err)
	}
	if len(subnets.Items)+len(atts.Items) > 0 {
		t.Errorf("kubectl kos check left %d Subnets and %d NetworkAttachments behind", len(subnets.Items), len(atts.Items))
	}
}

// blockTunnel drops every packet of the tunnel port (4789, the shared
// cluster's) on node n's underlay bridge, in front of the agent's own
// filter (which stays below operators' flows), both ways: the userspace
// datapath's tunnels end in ovs-vswitchd, past the node's netfilter. It
// returns what removes the drop.
func blockTunnel(t *testing.T, n *cluster.Node) func() {
	t.Helper()
	env := append(os.Environ(), "OVS_RUNDIR="+n.HostPath(agentOVSRunDir))
	const cookie = "0xe2ec4ec4"
	for _, match := range []string{"udp,tp_dst=4789", "udp,tp_src=4789"} {
		if out, err := runEnv(t.Context(), env, "ovs-ofctl", "add-flow", "br-ul", "cookie="+cookie+",priority=1000,"+match+",actions=drop"); err != nil {
			t.Fatalf("blocking node %s's tunnel: %v: %s", n.Name, err, out)
		}
	}
	done := false
	unblock := func() {
		if done {
			return
		}
		done = true
		if out, err := runEnv(context.Background(), env, "ovs-ofctl", "del-flows", "br-ul", "cookie="+cookie+"/-1"); err != nil {
			t.Errorf("unblocking node %s's tunnel: %v: %s", n.Name, err, out)
		}
	}
	t.Cleanup(unblock)
	return unblock
}

package kubectlkos

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kos-sdn/kos/components/agent/api"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/internal/cmdline"
)

// bundleOptions are the flags of support-bundle.
type bundleOptions struct {
	out           string
	node          string
	tailLines     int64
	since         time.Duration
	allNamespaces bool
	controlPlane  bool
}

// defaultTailLines is how many lines of each log a bundle holds.
const defaultTailLines = 10000

// maxLogBytes bounds each log in a bundle.
const maxLogBytes = 32 << 20

// kosResources are the KOS API's resources, when discovery cannot list
// them.
var kosResources = []string{"subnets", "networkattachments", "iplocks", "nodenetworkpolicies"}

func newSupportBundleCommand(o *options) *cobra.Command {
	bo := &bundleOptions{}
	cmd := &cobra.Command{
		Use:   "support-bundle",
		Short: "Write control-plane, agent and OVS logs, flows, tunnels, routes and KOS objects into one archive",
		Long: `Write a support bundle: a gzipped tar archive of what it takes to
troubleshoot KOS in a namespace, for a bug report or a colleague.

From every node's agent (or --node's), through the kube-apiserver: the
logs of the agent and of Open vSwitch (the pod's kos-agent and ovs
containers, and their previous runs), the agent's status, the switch's flows,
tunnel ports and neighbours, and the node's and Open vSwitch's routes. From
the control plane (unless --control-plane=false): the pods of kos-apiserver,
kos-etcd, kos-controller-manager and kos-pki, their logs, what
"kubectl kos status" says of them, and the KOS APIService. From the namespace
(-n), or every namespace that holds any (-A): the KOS objects (Subnets,
NetworkAttachments, IPLocks) and the namespace's Events.

--tail and --since bound every log: the last --tail lines, of those written
in the last --since.

No Secret is read. Tokens, passwords and keys found in the logs are replaced
by REDACTED, as are the values of the agent pods' environment variables.
What could not be collected is listed in errors.txt inside the archive.`,
		Example: `  kubectl kos support-bundle -n tenant-a
  kubectl kos support-bundle -A --since 2h
  kubectl kos support-bundle -n tenant-a -o /tmp/kos.tar.gz
  kubectl kos support-bundle -n tenant-a --node node-1 -o - > kos.tar.gz`,
		Args: cmdline.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if bo.tailLines == 0 || bo.tailLines < -1 {
				return cmdline.UsageErrorf(cmd, "--tail must be positive, or -1 for whole logs")
			}
			if bo.since < 0 {
				return cmdline.UsageErrorf(cmd, "--since must not be negative")
			}
			ns, err := o.namespace()
			if err != nil {
				return err
			}
			if bo.allNamespaces {
				ns = metav1.NamespaceAll
			}
			c, err := o.clients()
			if err != nil {
				return err
			}
			began := time.Now().UTC()
			if bo.out == "" {
				bo.out = "kos-support-bundle-" + began.Format("20060102T150405Z") + ".tar.gz"
			}
			w, closeOut, err := createOutput(bo.out, o.streams.Out)
			if err != nil {
				return err
			}
			src := &bundleSource{
				agents:    o.agents(c),
				kube:      c.kube,
				discovery: c.kube.Discovery(),
				dynamic:   c.dynamic,
			}
			if bo.controlPlane {
				src.controlPlane = o.controlPlane(c)
			}
			n, problems, err := writeBundle(cmd.Context(), w, src, bundleRequest{
				namespace: ns, allNamespaces: bo.allNamespaces, node: bo.node, tailLines: bo.tailLines, since: bo.since, now: began,
			})
			if cerr := closeOut(); err == nil {
				err = cerr
			}
			if err != nil {
				if bo.out != "-" {
					os.Remove(bo.out)
				}
				return err
			}
			if bo.out != "-" {
				fmt.Fprintf(o.streams.ErrOut, "Wrote %s: %d files, %d things not collected (see errors.txt).\n", bo.out, n, problems)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&bo.out, "output", "o", "", `The archive to write; "-" writes to standard output. Default: kos-support-bundle-<time>.tar.gz`)
	cmd.Flags().StringVar(&bo.node, "node", "", "Only the agent of this node")
	cmd.Flags().Int64Var(&bo.tailLines, "tail", defaultTailLines, "Lines of each log to keep, from its end; -1 keeps whole logs")
	cmd.Flags().DurationVar(&bo.since, "since", 0, "Keep only log lines newer than this (5m, 2h); 0 keeps them all")
	cmd.Flags().BoolVarP(&bo.allNamespaces, "all-namespaces", "A", false, "The KOS objects and Events of every namespace that holds KOS objects, instead of -n's")
	cmd.Flags().BoolVar(&bo.controlPlane, "control-plane", true, "The control plane's pods, logs and status, and the KOS APIService")
	return cmd
}

// createOutput opens the archive to write: a new file, never one that
// exists, readable by its owner alone (it holds logs), or stdout for "-".
func createOutput(name string, stdout io.Writer) (io.Writer, func() error, error) {
	if name == "-" {
		return stdout, func() error { return nil }, nil
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("creating the bundle: %w", err)
	}
	return f, f.Close, nil
}

// bundleSource is where a bundle's content comes from.
type bundleSource struct {
	agents    *agents
	kube      kubernetes.Interface
	discovery discovery.DiscoveryInterface
	dynamic   dynamic.Interface
	// controlPlane is read when not nil.
	controlPlane *controlPlane
}

// bundleRequest says what a bundle holds.
type bundleRequest struct {
	// namespace is "" for none, unless allNamespaces.
	namespace     string
	allNamespaces bool
	node          string
	tailLines     int64
	since         time.Duration
	now           time.Time
}

// bundleFile is one file of a bundle, relative to its top folder.
type bundleFile struct {
	name string
	data []byte
}

// writeBundle writes the bundle as a gzipped tar to w and returns how
// many files it holds and how many things could not be collected (listed
// in errors.txt). It fails only when it cannot list the agents or write.
func writeBundle(ctx context.Context, w io.Writer, src *bundleSource, req bundleRequest) (int, int, error) {
	pods, err := src.agents.list(ctx, req.node)
	if err != nil {
		return 0, 0, err
	}
	var problems []string
	var files []bundleFile
	add := func(name string, data []byte) { files = append(files, bundleFile{name: name, data: data}) }
	fail := func(what string, err error) { problems = append(problems, what+": "+err.Error()) }

	// The nodes, a few at a time: each costs several round trips.
	perNode := make([][]bundleFile, len(pods))
	nodeProblems := make([][]string, len(pods))
	var wg sync.WaitGroup
	slots := make(chan struct{}, agentConcurrency)
	for i := range pods {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			perNode[i], nodeProblems[i] = collectNode(ctx, src, &pods[i], req)
		})
	}
	wg.Wait()
	for i := range pods {
		files = append(files, perNode[i]...)
		problems = append(problems, nodeProblems[i]...)
	}
	if data, err := objectsYAML(podObjects(pods)); err != nil {
		fail("agent pods", err)
	} else {
		add("agents/pods.yaml", data)
	}

	if req.namespace != "" || req.allNamespaces {
		objs, errs := collectNamespaces(ctx, src, req.namespace)
		for _, f := range objs {
			add(f.name, f.data)
		}
		problems = append(problems, errs...)
	}
	controlPlaneNamespace := "<left out>"
	if src.controlPlane != nil {
		controlPlaneNamespace = src.controlPlane.namespace
		cpFiles, errs := collectControlPlane(ctx, src, req)
		files = append(files, cpFiles...)
		problems = append(problems, errs...)
	}
	namespace := orNone(req.namespace)
	if req.allNamespaces {
		namespace = "<all that hold KOS objects>"
	}

	slices.SortStableFunc(files, func(a, b bundleFile) int { return strings.Compare(a.name, b.name) })
	readme := fmt.Sprintf(`KOS support bundle
Written: %s by kubectl kos support-bundle
Namespace: %s
Node: %s
Agents: %d pods in namespace %s (%s)
Control plane: namespace %s
Logs: the last %s lines%s

control-plane/pods.yaml             the control plane's pods (environment values redacted)
control-plane/status.json           the control plane as kubectl kos status -o json shows it
control-plane/apiservice.yaml       the APIService of the KOS API
control-plane/POD/logs/CONTAINER[.previous].log   the control plane's logs, redacted
agents/pods.yaml                    the agent pods (environment values redacted)
nodes/NODE/status.json              the agent's status (kubectl kos status -o json shows the same)
nodes/NODE/flows.txt                ovs-ofctl dump-flows of the node's bridge
nodes/NODE/tunnels.txt              ovs-vsctl show, tunnel ports and neighbours
nodes/NODE/routes.txt               the node's IPv4 routes and Open vSwitch's
nodes/NODE/logs/CONTAINER[.previous].log   the agent's and Open vSwitch's logs, redacted
namespaces/NAMESPACE/RESOURCE.yaml  the namespace's KOS objects and Events
errors.txt                          what could not be collected
`, req.now.Format(time.RFC3339), namespace, orAll(req.node), len(pods), src.agents.namespace, src.agents.selector,
		controlPlaneNamespace, tailText(req.tailLines), sinceText(req.since))
	files = append([]bundleFile{{name: "README.txt", data: []byte(readme)}}, files...)
	if len(problems) > 0 {
		files = append(files, bundleFile{name: "errors.txt", data: []byte(strings.Join(problems, "\n") + "\n")})
	}
	top := "kos-support-bundle-" + req.now.Format("20060102T150405Z")
	if err := writeTarGz(w, top, req.now, files); err != nil {
		return 0, 0, fmt.Errorf("writing the bundle: %w", err)
	}
	return len(files), len(problems), nil
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func orAll(s string) string {
	if s == "" {
		return "<all>"
	}
	return s
}

func sinceText(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return " of the last " + d.String()
}

func tailText(n int64) string {
	if n < 0 {
		return "all"
	}
	return fmt.Sprint(n)
}

// collectNode reads what a bundle holds of one agent pod's node: its
// containers' logs and what its debug endpoints say.
func collectNode(ctx context.Context, src *bundleSource, pod *corev1.Pod, req bundleRequest) ([]bundleFile, []string) {
	node := pod.Spec.NodeName
	if node == "" {
		node = "unscheduled-" + pod.Name
	}
	dir := path.Join("nodes", node)
	files, problems := collectLogs(ctx, src.kube, pod, dir, req)
	if pod.Status.Phase != corev1.PodRunning {
		return files, append(problems, fmt.Sprintf("node %s: the agent pod %s is %s: its endpoints were not asked", node, pod.Name, pod.Status.Phase))
	}
	for _, ep := range []struct{ path, file string }{
		{api.PathStatus, "status.json"},
		{api.PathFlows, "flows.txt"},
		{api.PathTunnels, "tunnels.txt"},
		{api.PathRoutes, "routes.txt"},
	} {
		data, err := src.agents.get(ctx, pod, ep.path)
		if err != nil {
			problems = append(problems, fmt.Sprintf("node %s: %v", node, err))
			continue
		}
		files = append(files, bundleFile{name: path.Join(dir, ep.file), data: redactText(data)})
	}
	return files, problems
}

// collectLogs reads the logs of every container of pod, and of their
// previous runs after a restart, into dir/logs.
func collectLogs(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod, dir string, req bundleRequest) ([]bundleFile, []string) {
	var files []bundleFile
	var problems []string
	for _, c := range pod.Status.ContainerStatuses {
		runs := []bool{false}
		if c.RestartCount > 0 {
			runs = append(runs, true)
		}
		for _, previous := range runs {
			name := c.Name
			if previous {
				name += ".previous"
			}
			logs, err := readLogs(ctx, kube.CoreV1().Pods(pod.Namespace), pod.Name, c.Name, previous, req.tailLines, req.since)
			if err != nil {
				problems = append(problems, fmt.Sprintf("log of %s/%s container %s (previous %t): %v", pod.Namespace, pod.Name, c.Name, previous, err))
				continue
			}
			files = append(files, bundleFile{name: path.Join(dir, "logs", name+".log"), data: redactText(logs)})
		}
	}
	return files, problems
}

// collectControlPlane reads the control plane's pods, their logs, what
// status says of it, and the KOS APIService, into control-plane/.
func collectControlPlane(ctx context.Context, src *bundleSource, req bundleRequest) ([]bundleFile, []string) {
	cp := src.controlPlane
	var files []bundleFile
	var problems []string
	pods, err := cp.kube.CoreV1().Pods(cp.namespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name in (" + strings.Join(controlPlaneComponents, ",") + ")",
	})
	if err != nil {
		problems = append(problems, fmt.Sprintf("listing the control plane's pods in %s: %v", cp.namespace, err))
	} else {
		slices.SortFunc(pods.Items, func(x, y corev1.Pod) int { return strings.Compare(x.Name, y.Name) })
		for i := range pods.Items {
			f, errs := collectLogs(ctx, src.kube, &pods.Items[i], path.Join("control-plane", pods.Items[i].Name), req)
			files = append(files, f...)
			problems = append(problems, errs...)
		}
		if data, err := objectsYAML(podObjects(pods.Items)); err != nil {
			problems = append(problems, fmt.Sprintf("control-plane pods: %v", err))
		} else {
			files = append(files, bundleFile{name: "control-plane/pods.yaml", data: data})
		}
	}
	rows := cp.collect(ctx, req.now)
	list, err := statusList(statusReport{ControlPlane: rows})
	if err == nil {
		var data []byte
		if data, err = list.MarshalJSON(); err == nil {
			files = append(files, bundleFile{name: "control-plane/status.json", data: data})
		}
	}
	if err != nil {
		problems = append(problems, fmt.Sprintf("control-plane status: %v", err))
	}
	for _, r := range rows {
		if r.Error != "" {
			problems = append(problems, fmt.Sprintf("control plane: %s %s: %s", r.Component, r.Name, r.Error))
		}
	}
	u, err := cp.dynamic.Resource(apiServices).Get(ctx, kosAPIService, metav1.GetOptions{})
	if err != nil {
		return files, append(problems, fmt.Sprintf("reading the APIService %s: %v", kosAPIService, err))
	}
	data, err := objectsYAML([]*unstructured.Unstructured{u})
	if err != nil {
		return files, append(problems, fmt.Sprintf("the APIService: %v", err))
	}
	return append(files, bundleFile{name: "control-plane/apiservice.yaml", data: data}), problems
}

// readLogs reads the end of a container's log, at most maxLogBytes, of
// the last since if not 0.
func readLogs(ctx context.Context, pods typedcorev1.PodInterface, pod, container string, previous bool, tailLines int64, since time.Duration) ([]byte, error) {
	limit := int64(maxLogBytes)
	opts := &corev1.PodLogOptions{Container: container, Previous: previous, LimitBytes: &limit, Timestamps: true}
	if tailLines > 0 {
		opts.TailLines = &tailLines
	}
	if since > 0 {
		// The server counts whole seconds; round up, never to 0.
		seconds := int64((since + time.Second - 1) / time.Second)
		opts.SinceSeconds = &seconds
	}
	stream, err := pods.GetLogs(pod, opts).Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	return io.ReadAll(io.LimitReader(stream, maxLogBytes))
}

// collectNamespaces reads the KOS objects and the Events of namespace ns,
// or, when ns is "", of every namespace that holds KOS objects. It never
// reads Secrets: only the KOS API group and Events.
func collectNamespaces(ctx context.Context, src *bundleSource, ns string) ([]bundleFile, []string) {
	var files []bundleFile
	var problems []string
	resources := kosResources
	if list, err := src.discovery.ServerResourcesForGroupVersion(v1alpha1.SchemeGroupVersion.String()); err == nil {
		resources = nil
		for _, r := range list.APIResources {
			if r.Namespaced && !strings.Contains(r.Name, "/") && slices.Contains(r.Verbs, "list") {
				resources = append(resources, r.Name)
			}
		}
	} else {
		problems = append(problems, fmt.Sprintf("discovering the KOS API: %v (listing %s)", err, strings.Join(kosResources, ", ")))
	}
	slices.Sort(resources)
	where := ns
	if ns == "" {
		where = "every namespace"
	}
	// byNamespace holds each namespace's objects by resource; a named
	// namespace has every resource's file, even an empty one.
	byNamespace := map[string]map[string][]*unstructured.Unstructured{}
	if ns != "" {
		byNamespace[ns] = map[string][]*unstructured.Unstructured{}
	}
	listed := map[string]bool{}
	for _, r := range resources {
		list, err := src.dynamic.Resource(v1alpha1.SchemeGroupVersion.WithResource(r)).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			problems = append(problems, fmt.Sprintf("listing %s in %s: %v", r, where, err))
			continue
		}
		listed[r] = true
		for i := range list.Items {
			n := list.Items[i].GetNamespace()
			if byNamespace[n] == nil {
				byNamespace[n] = map[string][]*unstructured.Unstructured{}
			}
			byNamespace[n][r] = append(byNamespace[n][r], &list.Items[i])
		}
	}
	namespaces := slices.Sorted(maps.Keys(byNamespace))
	for _, n := range namespaces {
		dir := path.Join("namespaces", n)
		for _, r := range resources {
			if !listed[r] {
				continue
			}
			data, err := objectsYAML(byNamespace[n][r])
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s in %s: %v", r, n, err))
				continue
			}
			files = append(files, bundleFile{name: path.Join(dir, r+".yaml"), data: data})
		}
		f, errs := collectEvents(ctx, src, n)
		files = append(files, f...)
		problems = append(problems, errs...)
	}
	return files, problems
}

// collectEvents reads the Events of namespace ns.
func collectEvents(ctx context.Context, src *bundleSource, ns string) ([]bundleFile, []string) {
	var problems []string
	events, err := src.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, []string{fmt.Sprintf("listing the events of %s: %v", ns, err)}
	}
	var objs []*unstructured.Unstructured
	for i := range events.Items {
		u, err := typedObject(&events.Items[i], corev1.SchemeGroupVersion.WithKind("Event"))
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		objs = append(objs, u)
	}
	data, err := objectsYAML(objs)
	if err != nil {
		return nil, append(problems, fmt.Sprintf("events of %s: %v", ns, err))
	}
	return []bundleFile{{name: path.Join("namespaces", ns, "events.yaml"), data: data}}, problems
}

// podObjects turns pods into the unstructured objects a bundle holds.
func podObjects(pods []corev1.Pod) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for i := range pods {
		u, err := typedObject(&pods[i], corev1.SchemeGroupVersion.WithKind("Pod"))
		if err == nil {
			out = append(out, u)
		}
	}
	return out
}

// typedObject converts a typed object of kind gvk to unstructured, with
// its apiVersion and kind, which lists leave out of their items.
func typedObject(obj runtime.Object, gvk schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting a %s: %w", gvk.Kind, err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// objectsYAML redacts objects and writes them as one YAML List.
func objectsYAML(objs []*unstructured.Unstructured) ([]byte, error) {
	items := make([]any, 0, len(objs))
	for _, o := range objs {
		o = o.DeepCopy()
		redactObject(o)
		items = append(items, o.Object)
	}
	return yaml.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
}

// writeTarGz writes files as a gzipped tar under the folder top.
func writeTarGz(w io.Writer, top string, modTime time.Time, files []bundleFile) error {
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: top + "/", Mode: 0o700, ModTime: modTime}); err != nil {
		return err
	}
	dirs := map[string]bool{}
	for _, f := range files {
		// Parent folders first, as tar readers expect.
		var parents []string
		for d := path.Dir(f.name); d != "." && !dirs[d]; d = path.Dir(d) {
			parents = append(parents, d)
			dirs[d] = true
		}
		slices.Reverse(parents)
		for _, d := range parents {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: top + "/" + d + "/", Mode: 0o700, ModTime: modTime}); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: top + "/" + f.name, Mode: 0o600, Size: int64(len(f.data)), ModTime: modTime}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	return errors.Join(tw.Close(), gz.Close())
}

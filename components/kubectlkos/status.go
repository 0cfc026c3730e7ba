package kubectlkos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/kos-sdn/kos/components/agent/api"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"

	"github.com/kos-sdn/kos/internal/cmdline"
)

// outputAPIVersion and nodeStatusKind type the objects that -o json and
// yaml print. They exist only in this output.
const (
	outputAPIVersion    = "kubectl-kos.network.example.com/v1alpha1"
	nodeStatusKind      = "NodeStatus"
	componentStatusKind = "ComponentStatus"
)

// agentConcurrency bounds how many agents a command asks at once.
const agentConcurrency = 8

// NodeStatus is what status reports of one node: its agent pod, what the
// agent says, and how many of the node's attachments are not Ready.
type NodeStatus struct {
	Node string `json:"node"`
	// Pod, Phase, Image and Version are the agent pod's: the version is
	// the image's tag (or digest).
	Pod      string `json:"pod"`
	Phase    string `json:"phase"`
	Restarts int32  `json:"restarts"`
	Image    string `json:"image,omitempty"`
	Version  string `json:"version,omitempty"`
	// Agent is what the agent said; nil when it could not be asked, and
	// Error says why.
	Agent *api.Status `json:"agent,omitempty"`
	Error string      `json:"error,omitempty"`
	// Attachments counts the node's attachments in the KOS API and
	// NotReady those whose Ready condition is not True; both nil when the
	// attachments could not be listed.
	Attachments *int `json:"attachments,omitempty"`
	NotReady    *int `json:"notReady,omitempty"`
}

// statusReport is what status prints: the control plane's rows (nil when
// not asked for) and the nodes'.
type statusReport struct {
	ControlPlane []ComponentStatus
	Nodes        []NodeStatus
}

// statusOptions are the flags of status.
type statusOptions struct {
	node         string
	controlPlane bool
	print        *genericclioptions.PrintFlags
	noHeaders    bool
}

func newStatusCommand(o *options) *cobra.Command {
	so := &statusOptions{print: genericclioptions.NewPrintFlags("").WithDefaultOutput("")}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the control plane's and every node agent's status",
		Long: `Show the status of the KOS control plane, then of the KOS agent of every
node (or of --node, which leaves the control plane out).

The control plane: each pod of kos-apiserver, kos-etcd, kos-controller-manager
and kos-pki (version, Ready, restarts); each etcd member's role (leader,
follower, no leader) and database size against its quota, read from its
metrics; the APIService that serves the KOS API and whether it is Available;
and every certificate kos-pki keeps, with its expiry (not Ready within 21 days).

The agents: the agent's version (its image's tag), whether it is ready, the
local and remote attachments on the node's switch, the switch's flows, when the
agent last reconciled the switch, how many of the node's attachments are not
Ready, and the agent's errors. Everything is asked through the kube-apiserver.`,
		Example: `  kubectl kos status
  kubectl kos status -o wide
  kubectl kos status --node node-1 -o yaml`,
		Args: cmdline.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			print, err := so.printer(cmd)
			if err != nil {
				return err
			}
			c, err := o.clients()
			if err != nil {
				return err
			}
			var rep statusReport
			if so.node == "" && so.controlPlane {
				rep.ControlPlane = o.controlPlane(c).collect(cmd.Context(), time.Now())
			}
			rep.Nodes, err = collectStatus(cmd.Context(), o.agents(c), c.kos, so.node, o.warnf)
			if err != nil {
				return err
			}
			if len(rep.Nodes) == 0 {
				fmt.Fprintf(o.streams.ErrOut, "No agent pods found in namespace %s.\n", o.agentNamespace)
				if rep.ControlPlane == nil {
					return nil
				}
			}
			return print(o.streams.Out, rep, time.Now())
		},
	}
	cmd.Flags().StringVar(&so.node, "node", "", "Only the agent of this node (and not the control plane)")
	cmd.Flags().BoolVar(&so.controlPlane, "control-plane", true, "Show the control plane: kos-apiserver, etcd, kos-controller-manager, kos-pki, the APIService, the certificates")
	so.print.AddFlags(cmd)
	cmd.Flags().Lookup("output").Usage = "Output format: wide, json or yaml. Default: a table"
	cmd.Flags().BoolVar(&so.noHeaders, "no-headers", false, "Leave out the header line of the table")
	return cmd
}

// statusPrinter prints a status report; now is when ages are counted from.
type statusPrinter func(w io.Writer, rep statusReport, now time.Time) error

// printer checks -o and returns the printer it selects: a table (wide or
// not), or cli-runtime's JSON and YAML printers of a List.
func (so *statusOptions) printer(cmd *cobra.Command) (statusPrinter, error) {
	format := *so.print.OutputFormat
	if format == "" || format == "wide" {
		opts := printers.PrintOptions{NoHeaders: so.noHeaders, Wide: format == "wide"}
		return func(w io.Writer, rep statusReport, now time.Time) error {
			if rep.ControlPlane != nil {
				if err := printers.NewTablePrinter(opts).PrintObj(controlPlaneTable(rep.ControlPlane, now), w); err != nil {
					return err
				}
				if len(rep.Nodes) == 0 {
					return nil
				}
				fmt.Fprintln(w)
			}
			return printers.NewTablePrinter(opts).PrintObj(statusTable(rep.Nodes, now), w)
		}, nil
	}
	if format != "json" && format != "yaml" {
		return nil, cmdline.UsageErrorf(cmd, "--output %q is not a format; use wide, json or yaml", format)
	}
	p, err := so.print.ToPrinter()
	if err != nil {
		return nil, cmdline.UsageErrorf(cmd, "--output %q: %v", format, err)
	}
	return func(w io.Writer, rep statusReport, _ time.Time) error {
		list, err := statusList(rep)
		if err != nil {
			return err
		}
		return p.PrintObj(list, w)
	}, nil
}

// collectStatus asks every agent pod (of node, if set) for its status, at
// most agentConcurrency at once, and counts each node's attachments that
// are not Ready. An agent that does not answer gets its error in its row;
// attachments that cannot be listed are warned of.
func collectStatus(ctx context.Context, ag *agents, kos kosclient.Interface, node string, warnf func(string, ...any)) ([]NodeStatus, error) {
	pods, err := ag.list(ctx, node)
	if err != nil {
		return nil, err
	}
	statuses := make([]NodeStatus, len(pods))
	var wg sync.WaitGroup
	slots := make(chan struct{}, agentConcurrency)
	for i := range pods {
		statuses[i] = podStatus(&pods[i])
		if pods[i].Status.Phase != corev1.PodRunning {
			statuses[i].Error = fmt.Sprintf("the agent pod is %s", pods[i].Status.Phase)
			continue
		}
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			raw, err := ag.get(ctx, &pods[i], api.PathStatus)
			if err != nil {
				statuses[i].Error = err.Error()
				return
			}
			var st api.Status
			if err := json.Unmarshal(raw, &st); err != nil {
				statuses[i].Error = fmt.Sprintf("decoding the agent's status: %v", err)
				return
			}
			statuses[i].Agent = &st
		})
	}
	wg.Wait()

	total, notReady, err := attachmentsByNode(ctx, kos)
	if err != nil {
		warnf("not counting the attachments that are not Ready: %v", err)
		return statuses, nil
	}
	seen := map[string]bool{}
	for i := range statuses {
		t, n := total[statuses[i].Node], notReady[statuses[i].Node]
		statuses[i].Attachments, statuses[i].NotReady = &t, &n
		seen[statuses[i].Node] = true
	}
	// A node with attachments and no agent: nothing implements them.
	var orphans []NodeStatus
	for n, t := range total {
		if seen[n] || (node != "" && n != node) {
			continue
		}
		nr := notReady[n]
		orphans = append(orphans, NodeStatus{Node: n, Error: "no agent pod on this node", Attachments: &t, NotReady: &nr})
	}
	slices.SortFunc(orphans, func(x, y NodeStatus) int { return strings.Compare(x.Node, y.Node) })
	return append(statuses, orphans...), nil
}

// podStatus is what an agent pod tells of itself.
func podStatus(pod *corev1.Pod) NodeStatus {
	st := NodeStatus{Node: pod.Spec.NodeName, Pod: pod.Name, Phase: string(pod.Status.Phase)}
	st.Image, st.Version = agentImage(pod)
	for _, c := range pod.Status.ContainerStatuses {
		st.Restarts += c.RestartCount
	}
	return st
}

// attachmentsByNode counts the attachments of every namespace by node, and
// those whose Ready condition is not True.
func attachmentsByNode(ctx context.Context, kos kosclient.Interface) (total, notReady map[string]int, err error) {
	list, err := kos.NetworkV1alpha1().NetworkAttachments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		if apierrors.IsForbidden(err) {
			return nil, nil, fmt.Errorf("listing attachments in all namespaces is forbidden to you")
		}
		return nil, nil, fmt.Errorf("listing attachments: %w", err)
	}
	total, notReady = map[string]int{}, map[string]int{}
	for _, att := range list.Items {
		total[att.Spec.Node]++
		if !meta.IsStatusConditionTrue(att.Status.Conditions, v1alpha1.NetworkAttachmentReady) {
			notReady[att.Spec.Node]++
		}
	}
	return total, notReady, nil
}

var statusColumns = []metav1.TableColumnDefinition{
	{Name: "Node", Type: "string", Format: "name"},
	{Name: "Version", Type: "string"},
	{Name: "Ready", Type: "string"},
	{Name: "Local", Type: "string", Description: "Local attachments on the node's switch"},
	{Name: "Remote", Type: "string", Description: "Remote attachments on the node's switch"},
	{Name: "Flows", Type: "string"},
	{Name: "Not Ready", Type: "string", Description: "The node's attachments whose Ready condition is not True"},
	{Name: "Last Reconcile", Type: "string"},
	{Name: "Errors", Type: "string"},
	{Name: "Agent", Type: "string", Priority: 1},
	{Name: "Restarts", Type: "integer", Priority: 1},
	{Name: "Host IP", Type: "string", Priority: 1},
	{Name: "Networks", Type: "string", Priority: 1},
	{Name: "Reconcile Reason", Type: "string", Priority: 1},
	{Name: "Fabric Errors", Type: "string", Priority: 1},
}

// statusTable is the table of the default and wide formats. The Errors
// column holds the first error, shortened, and how many more there are:
// -o yaml shows them all.
func statusTable(statuses []NodeStatus, now time.Time) *metav1.Table {
	table := &metav1.Table{ColumnDefinitions: statusColumns}
	for _, st := range statuses {
		unknown := "<unknown>"
		ready, local, remote, flows, last, hostIP, networks, reason, fabricErrs := unknown, unknown, unknown, unknown, unknown, unknown, unknown, unknown, "<none>"
		errs := st.errors()
		if a := st.Agent; a != nil {
			ready = fmt.Sprint(a.Ready)
			local, remote, networks = fmt.Sprint(a.Local), fmt.Sprint(a.Remote), fmt.Sprint(a.Networks)
			if a.Flows >= 0 {
				flows = fmt.Sprint(a.Flows)
			}
			last, reason = "<never>", "<none>"
			if !a.LastReconcile.IsZero() {
				last = duration.HumanDuration(now.Sub(a.LastReconcile)) + " ago"
				reason = a.LastReconcileReason
			}
			hostIP = a.HostIP
			if len(a.FabricErrors) > 0 {
				fabricErrs = formatCounts(a.FabricErrors)
			}
		}
		notReady := unknown
		if st.NotReady != nil {
			notReady = fmt.Sprintf("%d/%d", *st.NotReady, *st.Attachments)
		}
		version := st.Version
		if version == "" {
			version = "<unknown>"
		}
		table.Rows = append(table.Rows, metav1.TableRow{
			Cells: []any{st.Node, version, ready, local, remote, flows, notReady, last, summarize(errs, 60),
				st.Pod, int64(st.Restarts), hostIP, networks, reason, fabricErrs},
		})
	}
	return table
}

// errors returns every problem of the node: the agent's, or why it could
// not be asked.
func (st NodeStatus) errors() []string {
	var errs []string
	if st.Error != "" {
		errs = append(errs, st.Error)
	}
	if st.Agent != nil {
		errs = append(errs, st.Agent.Errors...)
	}
	return errs
}

// summarize returns "<none>", or the first error shortened to max runes and
// "(+N more)".
func summarize(errs []string, max int) string {
	if len(errs) == 0 {
		return "<none>"
	}
	first := strings.Join(strings.Fields(errs[0]), " ")
	if r := []rune(first); len(r) > max {
		first = string(r[:max-1]) + "…"
	}
	if len(errs) > 1 {
		first += fmt.Sprintf(" (+%d more)", len(errs)-1)
	}
	return first
}

// formatCounts writes counts as "a=1,b=2", sorted by name.
func formatCounts(counts map[string]int) string {
	var parts []string
	for k, v := range counts {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// statusList is the List that -o json and yaml print: one ComponentStatus
// object per control-plane row, then one NodeStatus object per node.
func statusList(rep statusReport) (*unstructured.UnstructuredList, error) {
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{"resourceVersion": ""}}}
	add := func(v any, kind, name string) error {
		raw, err := json.Marshal(v)
		if err != nil {
			return err
		}
		obj := map[string]any{}
		if err := json.Unmarshal(raw, &obj); err != nil {
			return err
		}
		obj["apiVersion"], obj["kind"] = outputAPIVersion, kind
		obj["metadata"] = map[string]any{"name": name}
		list.Items = append(list.Items, unstructured.Unstructured{Object: obj})
		return nil
	}
	for _, c := range rep.ControlPlane {
		if err := add(c, componentStatusKind, c.Component+"/"+c.Name); err != nil {
			return nil, err
		}
	}
	for _, st := range rep.Nodes {
		if err := add(st, nodeStatusKind, st.Node); err != nil {
			return nil, err
		}
	}
	return list, nil
}

package kubectlkos

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/kos-sdn/kos/internal/cmdline"
)

// etcdQuotaWarning is the share of its quota a member's database may fill
// before check fails it: as alert KOSEtcdDatabaseNearQuota.
const etcdQuotaWarning = 0.8

// CheckResult is the outcome of one health check.
type CheckResult struct {
	Check  string `json:"check"`
	Passed bool   `json:"passed"`
	// Skipped is a check that could not run and so did not fail.
	Skipped bool   `json:"skipped,omitempty"`
	Detail  string `json:"detail"`
}

func newCheckCommand(o *options) *cobra.Command {
	var noHeaders, skipDatapath bool
	timeout := 2 * time.Minute
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check KOS's health: control plane, etcd, APIService, certificates, agents, attachments",
		Long: `Check the health of KOS, as "kubectl kos status" reads it, and print one row
per check. It exits 0 when every check passes and 1 when any fails (or when it
could not read what it checks), so that scripts can rely on it.

The checks: each control-plane component (kos-apiserver, kos-etcd,
kos-controller-manager, kos-pki) has a pod and every pod of it is Ready; etcd
has one leader and every member's database is under 80% of its quota; the
APIService of the KOS API is Available; no certificate kos-pki keeps expires
within 21 days; every node's agent is ready and reports no error, and every
node with attachments has an agent; every attachment is Ready.

Then, unless --skip-datapath, it checks the datapath: it makes a scratch
network (a Subnet of ` + probeCIDR + ` on a VNI no Subnet uses, in a scratch
namespace it creates, or in the namespace of -n), puts a probe on every node
that has an agent (a NetworkAttachment per node, which the node's agent serves
with a probe through its debug endpoint), and from every node to every other
checks a ping, a ping of the network's MTU with Don't Fragment set, and a TCP
connection. It prints a row per ordered pair, fails naming each pair that
failed, and deletes what it made, also when interrupted. Agents that serve no
probes (releases before they did) skip this part.`,
		Example: `  kubectl kos check
  kubectl kos check --skip-datapath
  kubectl kos check -n kos-scratch --timeout 5m
  kubectl kos check >/dev/null || echo "KOS is not healthy"`,
		Args: cmdline.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.clients()
			if err != nil {
				return err
			}
			now := time.Now()
			rep := statusReport{ControlPlane: o.controlPlane(c).collect(cmd.Context(), now)}
			rep.Nodes, err = collectStatus(cmd.Context(), o.agents(c), c.kos, "", o.warnf)
			if err != nil {
				return err
			}
			results := runChecks(rep, now)
			var pairs []PairResult
			if !skipDatapath {
				var r CheckResult
				r, pairs = o.datapath(c, timeout).check(cmd.Context(), rep.Nodes)
				results = append(results, r)
			}
			if err := printChecks(o.streams.Out, results, noHeaders); err != nil {
				return err
			}
			if len(pairs) > 0 {
				fmt.Fprintln(o.streams.Out)
				if err := printPairs(o.streams.Out, pairs, noHeaders); err != nil {
					return err
				}
			}
			return checksError(results)
		},
	}
	cmd.Flags().BoolVar(&noHeaders, "no-headers", false, "Leave out the header line of the table")
	cmd.Flags().BoolVar(&skipDatapath, "skip-datapath", false, "Check the status only: make no scratch network and no probes")
	cmd.Flags().DurationVar(&timeout, "timeout", timeout, "How long the datapath check may take, from making the scratch network to the last pair")
	return cmd
}

// checksError returns nil when every check passed, else an error naming
// the checks that failed, and the datapath check's pairs.
func checksError(results []CheckResult) error {
	var failed []string
	for _, r := range results {
		switch {
		case r.Passed:
		case r.Check == "datapath":
			failed = append(failed, "datapath ("+r.Detail+")")
		default:
			failed = append(failed, r.Check)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d checks failed: %s", len(failed), len(results), strings.Join(failed, ", "))
}

// runChecks evaluates the checks on a status report.
func runChecks(rep statusReport, now time.Time) []CheckResult {
	var results []CheckResult
	add := func(check string, problems []string, ok string) {
		r := CheckResult{Check: check, Passed: len(problems) == 0, Detail: ok}
		if !r.Passed {
			r.Detail = summarize(problems, 100)
		}
		results = append(results, r)
	}

	byComponent := map[string][]ComponentStatus{}
	for _, row := range rep.ControlPlane {
		byComponent[row.Component] = append(byComponent[row.Component], row)
	}
	for _, component := range controlPlaneComponents {
		rows := byComponent[component]
		var problems []string
		ready := 0
		for _, r := range rows {
			switch {
			case r.Name == "<none>":
				problems = append(problems, r.Error)
			case !r.Ready:
				problems = append(problems, fmt.Sprintf("pod %s is not Ready%s", r.Name, suffix(r.Error)))
			default:
				ready++
			}
		}
		add(component, problems, fmt.Sprintf("%d of %d pods Ready", ready, len(rows)))
	}

	var leaders, members int
	var problems []string
	for _, r := range byComponent["kos-etcd"] {
		if r.Name == "<none>" {
			continue
		}
		members++
		if r.Leader != nil && *r.Leader {
			leaders++
		}
		if r.DBSize != nil && r.DBQuota != nil && *r.DBQuota > 0 && float64(*r.DBSize) >= etcdQuotaWarning*float64(*r.DBQuota) {
			problems = append(problems, fmt.Sprintf("member %s's database fills %.0f%% of its quota", r.Name, 100*float64(*r.DBSize)/float64(*r.DBQuota)))
		}
		if r.Error != "" && r.Ready {
			problems = append(problems, fmt.Sprintf("member %s: %s", r.Name, r.Error))
		}
	}
	if leaders != 1 {
		problems = append([]string{fmt.Sprintf("%d of %d members say they lead, want 1", leaders, members)}, problems...)
	}
	add("etcd leader and quota", problems, fmt.Sprintf("one leader of %d members, every database under %.0f%% of its quota", members, 100*etcdQuotaWarning))

	problems = nil
	for _, r := range byComponent[componentAPIService] {
		if !r.Ready {
			problems = append(problems, fmt.Sprintf("%s is not Available: %s", r.Name, strings.TrimSpace(r.Message+" "+r.Error)))
		}
	}
	if byComponent[componentAPIService] == nil {
		problems = append(problems, "the APIService was not read")
	}
	add("apiservice", problems, kosAPIService+" Available")

	problems = nil
	certs := byComponent[componentCertificate]
	for _, r := range certs {
		if !r.Ready && r.Expires != nil {
			problems = append(problems, fmt.Sprintf("%s expires %s", r.Name, r.Expires.Format(time.DateOnly)))
		}
	}
	if len(certs) == 0 {
		problems = append(problems, "kos-pki reported no certificate")
	}
	add("certificates", problems, fmt.Sprintf("%d certificates valid for over %s", len(certs), durationDays(certificateWarning)))

	problems = nil
	var notReady, attachments int
	for _, st := range rep.Nodes {
		switch {
		case st.Pod == "":
			problems = append(problems, fmt.Sprintf("node %s: %s", st.Node, st.Error))
		case st.Agent == nil:
			problems = append(problems, fmt.Sprintf("node %s: %s", st.Node, st.Error))
		case !st.Agent.Ready || len(st.errors()) > 0:
			problems = append(problems, fmt.Sprintf("node %s: %s", st.Node, summarize(st.errors(), 200)))
		}
		if st.NotReady != nil {
			notReady += *st.NotReady
			attachments += *st.Attachments
		}
	}
	if len(rep.Nodes) == 0 {
		problems = append(problems, "no agent pods")
	}
	add("agents", problems, fmt.Sprintf("%d agents ready", len(rep.Nodes)))

	problems = nil
	if notReady > 0 {
		problems = append(problems, fmt.Sprintf("%d of %d attachments are not Ready (kubectl kos status shows by node)", notReady, attachments))
	}
	add("attachments", problems, fmt.Sprintf("%d attachments Ready", attachments))
	return results
}

func suffix(err string) string {
	if err == "" {
		return ""
	}
	return ": " + err
}

func durationDays(d time.Duration) string {
	return fmt.Sprintf("%d days", int(d.Hours()/24))
}

var checkColumns = []metav1.TableColumnDefinition{
	{Name: "Check", Type: "string"},
	{Name: "Result", Type: "string"},
	{Name: "Detail", Type: "string"},
}

func printChecks(w io.Writer, results []CheckResult, noHeaders bool) error {
	table := &metav1.Table{ColumnDefinitions: checkColumns}
	for _, r := range results {
		result := "ok"
		switch {
		case r.Skipped:
			result = "skip"
		case !r.Passed:
			result = "FAIL"
		}
		table.Rows = append(table.Rows, metav1.TableRow{Cells: []any{r.Check, result, r.Detail}})
	}
	return printers.NewTablePrinter(printers.PrintOptions{NoHeaders: noHeaders}).PrintObj(table, w)
}

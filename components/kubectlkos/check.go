package kubectlkos

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"
)

// etcdQuotaWarning is the share of its quota a member's database may fill
// before check fails it: as alert KOSEtcdDatabaseNearQuota.
const etcdQuotaWarning = 0.8

// CheckResult is the outcome of one health check.
type CheckResult struct {
	Check  string `json:"check"`
	Passed bool   `json:"passed"`
	Detail string `json:"detail"`
}

func newCheckCommand(o *options) *cobra.Command {
	var noHeaders bool
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
node with attachments has an agent; every attachment is Ready.`,
		Example: `  kubectl kos check
  kubectl kos check >/dev/null || echo "KOS is not healthy"`,
		Args: noArgs,
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
			if err := printChecks(o.streams.Out, results, noHeaders); err != nil {
				return err
			}
			failed := 0
			for _, r := range results {
				if !r.Passed {
					failed++
				}
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d checks failed", failed, len(results))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&noHeaders, "no-headers", false, "Leave out the header line of the table")
	return cmd
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
		if !r.Passed {
			result = "FAIL"
		}
		table.Rows = append(table.Rows, metav1.TableRow{Cells: []any{r.Check, result, r.Detail}})
	}
	return printers.NewTablePrinter(printers.PrintOptions{NoHeaders: noHeaders}).PrintObj(table, w)
}

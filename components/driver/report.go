package driver

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// writeSummary prints the table of a run: what each phase achieved, the
// latency quantiles, and the errors.
func writeSummary(out io.Writer, res *Result) {
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(out, "\nkos-driver run %s summary\n", res.RunID)
	fmt.Fprintln(w, "phase\tduration\tcreates\tcreates/s\tdeletes\tdeletes/s\t")
	for _, p := range res.Phases {
		secs := p.Duration.Seconds()
		fmt.Fprintf(w, "%s\t%s\t%d\t%.1f\t%d\t%.1f\t\n", p.Name, p.Duration.Round(time.Millisecond), p.Creates, rate(p.Creates, secs), p.Deletes, rate(p.Deletes, secs))
	}
	w.Flush()
	fmt.Fprintln(out)
	fmt.Fprintln(w, "latency (s)\tcount\tp50\tp90\tp99\tmax\t")
	for _, name := range latencyNames {
		v := res.Latencies[name]
		if len(v) == 0 {
			fmt.Fprintf(w, "%s\t0\t-\t-\t-\t-\t\n", name)
			continue
		}
		fmt.Fprintf(w, "%s\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t\n", name, len(v), quantile(v, 0.5), quantile(v, 0.9), quantile(v, 0.99), v[len(v)-1])
	}
	w.Flush()
	var errs []string
	total := 0
	for _, k := range errorKinds {
		errs = append(errs, fmt.Sprintf("%s %d", k, res.Errors[k]))
		total += res.Errors[k]
	}
	fmt.Fprintf(out, "\nerrors: %d (%s)\n", total, strings.Join(errs, ", "))
}

func rate(n int, secs float64) float64 {
	if secs <= 0 {
		return 0
	}
	return float64(n) / secs
}

// CSVHeader is the first row of the CSV: one row follows per attachment.
// Latencies are in seconds, empty when not reached; created is the client's
// time of the create call.
var CSVHeader = []string{"name", "vni", "node", "phase", "created", "create_s", "create_to_address_s", "create_to_ready_s", "create_to_tested_s", "delete_s", "ipv4", "errors"}

func (d *Driver) writeCSV(out io.Writer) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := csv.NewWriter(out)
	if err := w.Write(CSVHeader); err != nil {
		return err
	}
	secs := func(v float64) string {
		if v < 0 {
			return ""
		}
		return strconv.FormatFloat(v, 'f', 6, 64)
	}
	for _, r := range d.order {
		create, del := "", ""
		if !r.hasErr(ErrCreate) {
			create = secs(r.createDur.Seconds())
		}
		if r.deleted && r.deleteDur > 0 {
			del = secs(r.deleteDur.Seconds())
		}
		if err := w.Write([]string{
			r.name, strconv.FormatUint(uint64(r.network.vni), 10), r.node, r.phase, r.created.UTC().Format(time.RFC3339Nano),
			create, secs(r.addressed), secs(r.ready), secs(r.tested), del, r.ipv4, strings.Join(r.errs, "; "),
		}); err != nil {
			return err
		}
	}
	w.Flush()
	return w.Error()
}

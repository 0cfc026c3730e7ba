package figures

import (
	"regexp"
	"strconv"
	"strings"
)

// BenchParser reads the output of `go test -bench`, a line at a time, and
// returns the figures of each result line: one per metric (ns/op, B/op,
// the benchmark's own ReportMetric units), named by the metric's unit, of
// the benchmark as Test (its name without the -GOMAXPROCS suffix). The
// zero value is ready to use.
type BenchParser struct {
	// pending is the name of a benchmark whose result line comes later:
	// go test prints the name alone when the benchmark logs before its
	// result.
	pending string
}

// procsSuffix is the -GOMAXPROCS suffix of a benchmark's name.
var procsSuffix = regexp.MustCompile(`-\d+$`)

// Line returns the figures of one line of output, none for a line that is
// not a result.
func (p *BenchParser) Line(line string) []Figure {
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return nil
	}
	name := ""
	if strings.HasPrefix(fields[0], "Benchmark") {
		name = procsSuffix.ReplaceAllString(fields[0], "")
		fields = fields[1:]
		if len(fields) == 0 {
			p.pending = name
			return nil
		}
	} else if p.pending != "" && len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
		name = p.pending
	} else {
		return nil
	}
	// The iterations, then value-unit pairs.
	if _, err := strconv.Atoi(fields[0]); err != nil || len(fields)%2 != 1 {
		return nil
	}
	p.pending = ""
	var out []Figure
	for i := 1; i+1 < len(fields); i += 2 {
		v, err := strconv.ParseFloat(fields[i], 64)
		if err != nil {
			return nil
		}
		out = append(out, Figure{Test: name, Name: fields[i+1], Value: v, Unit: fields[i+1]})
	}
	return out
}

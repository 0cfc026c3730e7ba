package figures

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// A Markdown page holds a table of figures between two comment lines:
//
//	<!-- figures FILE TEST NAME... -->
//	| test | NAME... | load | recorded |
//	...
//	<!-- /figures -->
//
// FILE is a figures file, relative to the page's folder; TEST a regular
// expression of the tests (benchmarks) that are the table's rows, in the
// order the file first names them; each NAME a figure that is a column.
// Each cell is the last figure of its test and name the file holds, so a
// file that runs are appended to gives the newest figures; ns/op, Go's
// time per iteration, shows as s/op. Tables
// rewrites every such table from its file; a page whose tables differ
// from what Tables makes of them cites figures no file holds.

// tableStart matches a table's opening comment.
var tableStart = regexp.MustCompile(`^<!-- figures (\S+) (\S+)((?: \S+)+) -->$`)

// tableEnd is a table's closing comment.
const tableEnd = "<!-- /figures -->"

// Tables returns page (the Markdown file at path) with every table of
// figures made again from its figures file.
func Tables(path string, page []byte) ([]byte, error) {
	lines := strings.SplitAfter(string(page), "\n")
	var out strings.Builder
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		out.WriteString(line)
		m := tableStart.FindStringSubmatch(strings.TrimRight(line, "\n"))
		if m == nil {
			continue
		}
		end := i + 1
		for end < len(lines) && strings.TrimRight(lines[end], "\n") != tableEnd {
			end++
		}
		if end == len(lines) {
			return nil, fmt.Errorf("%s:%d: no %s after the table's opening", path, i+1, tableEnd)
		}
		table, err := makeTable(filepath.Join(filepath.Dir(path), m[1]), m[2], strings.Fields(m[3]))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
		out.WriteString(table)
		i = end - 1
	}
	return []byte(out.String()), nil
}

// makeTable returns the Markdown table of the figures in file of the tests
// that match test, with a column per name.
func makeTable(file, test string, names []string) (string, error) {
	re, err := regexp.Compile(test)
	if err != nil {
		return "", fmt.Errorf("test pattern: %w", err)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	all, err := Read(bytes.NewReader(data))
	if err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	var tests []string
	last := map[[2]string]Figure{}
	for _, f := range all {
		if !re.MatchString(f.Test) {
			continue
		}
		key := [2]string{f.Test, f.Name}
		if _, seen := last[[2]string{f.Test, ""}]; !seen {
			tests = append(tests, f.Test)
			last[[2]string{f.Test, ""}] = f
		}
		last[key] = f
	}
	if len(tests) == 0 {
		return "", fmt.Errorf("%s holds no figure of a test matching %q", file, test)
	}
	var b strings.Builder
	headers := make([]string, len(names))
	for i, n := range names {
		headers[i] = n
		if n == "ns/op" {
			headers[i] = "s/op"
		}
	}
	b.WriteString("| test | " + strings.Join(headers, " | ") + " | load | recorded |\n")
	b.WriteString("|---|" + strings.Repeat("---|", len(names)+2) + "\n")
	for _, t := range tests {
		cells := []string{"`" + t + "`"}
		var newest Figure
		for _, n := range names {
			f, ok := last[[2]string{t, n}]
			if !ok {
				cells = append(cells, "")
				continue
			}
			v := f.Value
			if n == "ns/op" {
				v /= 1e9
			}
			cells = append(cells, formatValue(v))
			if f.Time.After(newest.Time) {
				newest = f
			}
		}
		recorded := ""
		if !newest.Time.IsZero() {
			recorded = newest.Time.Format("2006-01-02")
		}
		cells = append(cells, newest.Load, recorded)
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	return b.String(), nil
}

// formatValue writes v with at most three significant digits after the
// integer part's, and none for an integer.
func formatValue(v float64) string {
	if v == float64(int64(v)) {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

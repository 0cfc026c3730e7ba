package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/util/jsonpath"

	"github.com/kos-sdn/kos/internal/cmdline"
)

// outputAPIVersion is the apiVersion of the objects -o json, yaml, name and
// the templates print. They exist only in this output: the group is the one
// of the install record annotations.
const outputAPIVersion = "addons.k8s.io/v1alpha1"

// outputFlags are the -o and --no-headers flags of a command that prints
// objects the way kubectl get does.
type outputFlags struct {
	print     *genericclioptions.PrintFlags
	noHeaders bool
}

// Formats -o accepts besides the ones cli-runtime's PrintFlags know.
const (
	formatWide              = "wide"
	formatCustomColumns     = "custom-columns"
	formatCustomColumnsFile = "custom-columns-file"
)

func addOutputFlags(cmd *cobra.Command) *outputFlags {
	f := &outputFlags{print: genericclioptions.NewPrintFlags("")}
	f.print.AddFlags(cmd)
	formats := append([]string{formatWide}, f.print.AllowedFormats()...)
	formats = append(formats, formatCustomColumns+"=SPEC", formatCustomColumnsFile+"=FILE")
	cmd.Flags().Lookup("output").Usage = fmt.Sprintf("Output format, as kubectl get takes it: %s. Default: a table", strings.Join(formats, ", "))
	cmd.Flags().BoolVar(&f.noHeaders, "no-headers", false, "Leave out the header line of the table, wide and custom-columns formats")
	return f
}

// format is the -o value.
func (f *outputFlags) format() string { return *f.print.OutputFormat }

// table reports whether the output is a table (default or wide), the
// format whose progress lines may share stdout.
func (f *outputFlags) table() bool {
	return f.format() == "" || f.format() == formatWide
}

// objectPrinter prints a list of objects; table builds the table of the
// default and wide formats.
type objectPrinter func(w io.Writer, objs []*unstructured.Unstructured, table func() *metav1.Table) error

// printer checks the flags and returns the printer they select. A format it
// does not know or a template that does not parse is a usage error.
func (f *outputFlags) printer(cmd *cobra.Command) (objectPrinter, error) {
	format := f.format()
	switch {
	case format == "" || format == formatWide:
		opts := printers.PrintOptions{NoHeaders: f.noHeaders, Wide: format == formatWide}
		return func(w io.Writer, _ []*unstructured.Unstructured, table func() *metav1.Table) error {
			return printers.NewTablePrinter(opts).PrintObj(table(), w)
		}, nil
	case strings.HasPrefix(format, formatCustomColumns+"="), strings.HasPrefix(format, formatCustomColumnsFile+"="):
		spec, err := customColumnsSpec(format)
		if err != nil {
			return nil, cmdline.UsageErrorf(cmd, "-o %s: %v", format, err)
		}
		cols, err := parseCustomColumns(spec)
		if err != nil {
			return nil, cmdline.UsageErrorf(cmd, "-o %s: %v", format, err)
		}
		return func(w io.Writer, objs []*unstructured.Unstructured, _ func() *metav1.Table) error {
			return printCustomColumns(w, cols, objs, f.noHeaders)
		}, nil
	}
	p, err := f.print.ToPrinter()
	if genericclioptions.IsNoCompatiblePrinterError(err) {
		return nil, cmdline.UsageErrorf(cmd, "--output %q is not a format; use one of: %s", format, strings.Join(append([]string{formatWide, formatCustomColumns + "=SPEC"}, f.print.AllowedFormats()...), ", "))
	}
	if err != nil {
		return nil, cmdline.UsageErrorf(cmd, "--output %q: %v", format, err)
	}
	if format == "name" {
		return func(w io.Writer, objs []*unstructured.Unstructured, _ func() *metav1.Table) error {
			for _, o := range objs {
				if err := p.PrintObj(o, w); err != nil {
					return err
				}
			}
			return nil
		}, nil
	}
	// JSON, YAML and templates see one List, as kubectl get prints several
	// objects.
	return func(w io.Writer, objs []*unstructured.Unstructured, _ func() *metav1.Table) error {
		return p.PrintObj(toList(objs), w)
	}, nil
}

// toList wraps objects in a List.
func toList(objs []*unstructured.Unstructured) *unstructured.UnstructuredList {
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "List", "metadata": map[string]any{"resourceVersion": ""}}}
	for _, o := range objs {
		list.Items = append(list.Items, *o)
	}
	return list
}

// customColumnsSpec returns the column spec of -o custom-columns=SPEC, or
// the content of the file -o custom-columns-file=FILE names.
func customColumnsSpec(format string) (string, error) {
	if spec, ok := strings.CutPrefix(format, formatCustomColumns+"="); ok {
		return spec, nil
	}
	file, _ := strings.CutPrefix(format, formatCustomColumnsFile+"=")
	data, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	// The file holds a header line of names and a line of JSONPath
	// expressions below them, as kubectl reads it.
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 2 {
		return "", fmt.Errorf("%s: want two lines, names and JSONPath expressions, got %d", file, len(lines))
	}
	names, paths := strings.Fields(lines[0]), strings.Fields(lines[1])
	if len(names) != len(paths) {
		return "", fmt.Errorf("%s: %d names but %d expressions", file, len(names), len(paths))
	}
	parts := make([]string, len(names))
	for i := range names {
		parts[i] = names[i] + ":" + paths[i]
	}
	return strings.Join(parts, ","), nil
}

// customColumn is one column of -o custom-columns.
type customColumn struct {
	header string
	path   *jsonpath.JSONPath
}

// parseCustomColumns reads NAME:JSONPATH[,NAME:JSONPATH...]. A path may
// leave out its braces and leading dot, as kubectl allows.
func parseCustomColumns(spec string) ([]customColumn, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, errors.New("give columns as NAME:JSONPATH[,NAME:JSONPATH...]")
	}
	var cols []customColumn
	for _, part := range strings.Split(spec, ",") {
		name, expr, ok := strings.Cut(part, ":")
		if !ok || name == "" || expr == "" {
			return nil, fmt.Errorf("column %q: want NAME:JSONPATH", part)
		}
		expr = strings.TrimSuffix(strings.TrimPrefix(expr, "{"), "}")
		if !strings.HasPrefix(expr, ".") && !strings.HasPrefix(expr, "[") {
			expr = "." + expr
		}
		p := jsonpath.New(name).AllowMissingKeys(true)
		if err := p.Parse("{" + expr + "}"); err != nil {
			return nil, fmt.Errorf("column %s: %w", name, err)
		}
		cols = append(cols, customColumn{header: name, path: p})
	}
	return cols, nil
}

// printCustomColumns prints one row per object, "<none>" where a path finds
// nothing, as kubectl does.
func printCustomColumns(w io.Writer, cols []customColumn, objs []*unstructured.Unstructured, noHeaders bool) error {
	tw := printers.GetNewTabWriter(w)
	if !noHeaders {
		headers := make([]string, len(cols))
		for i, c := range cols {
			headers[i] = c.header
		}
		fmt.Fprintln(tw, strings.Join(headers, "\t"))
	}
	for _, o := range objs {
		cells := make([]string, len(cols))
		for i, c := range cols {
			results, err := c.path.FindResults(o.Object)
			if err != nil {
				return fmt.Errorf("column %s: %w", c.header, err)
			}
			var values []string
			for _, r := range results {
				for _, v := range r {
					if v.IsValid() && !(v.Kind() == reflect.Interface && v.IsNil()) {
						values = append(values, fmt.Sprint(v.Interface()))
					}
				}
			}
			cells[i] = "<none>"
			if len(values) > 0 {
				cells[i] = strings.Join(values, ",")
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// runtimeObject is the row object of a table.
func runtimeObject(u *unstructured.Unstructured) runtime.RawExtension {
	return runtime.RawExtension{Object: u}
}

// toUnstructured turns a typed output object into the unstructured form the
// printers take.
func toUnstructured(obj any) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("converting output: %w", err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// Command table prints figures files (tools/figures) as one table, a row per
// figure: go run ./tools/figures/table _output/figures.jsonl.
package main

import (
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"

	"github.com/kos-sdn/kos/tools/figures"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: go run ./tools/figures/table FILE...")
		os.Exit(2)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TEST\tFIGURE\tVALUE\tUNIT\tLOAD")
	for _, path := range os.Args[1:] {
		if err := printFile(w, path); err != nil {
			fmt.Fprintf(os.Stderr, "table: %s: %v\n", path, err)
			os.Exit(1)
		}
	}
	w.Flush()
}

func printFile(w *tabwriter.Writer, path string) error {
	file, err := os.Open(path)
	if err != nil {
		return err
	}
	defer file.Close()
	all, err := figures.Read(file)
	if err != nil {
		return err
	}
	for _, f := range all {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", f.Test, f.Name, strconv.FormatFloat(f.Value, 'f', -1, 64), f.Unit, f.Load)
	}
	return nil
}

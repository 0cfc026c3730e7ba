// Command doc makes the tables of figures of Markdown pages from the
// figures files they name (figures.Tables): with -write it rewrites the
// pages; without, it checks them, and fails naming each page whose tables
// differ from their files (make verify runs it on docs/).
//
//	go run ./tools/figures/doc -write docs/benchmarks.md
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"github.com/kos-sdn/kos/tools/figures"
)

func main() {
	write := flag.Bool("write", false, "rewrite the pages instead of checking them")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: go run ./tools/figures/doc [-write] PAGE.md...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	failed := false
	for _, path := range flag.Args() {
		page, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "doc: %v\n", err)
			failed = true
			continue
		}
		made, err := figures.Tables(path, page)
		switch {
		case err != nil:
			fmt.Fprintf(os.Stderr, "doc: %v\n", err)
			failed = true
		case bytes.Equal(made, page):
		case *write:
			if err := os.WriteFile(path, made, 0o644); err != nil {
				fmt.Fprintf(os.Stderr, "doc: %v\n", err)
				failed = true
			}
		default:
			fmt.Fprintf(os.Stderr, "doc: %s: its tables of figures differ from their figures files; run go run ./tools/figures/doc -write %s\n", path, path)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

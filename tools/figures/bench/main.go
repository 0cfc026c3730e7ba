// Command bench copies the output of `go test -bench` from its standard
// input to its standard output and appends every benchmark result's
// metrics to the figures file $KOS_FIGURES names (tools/figures), one
// figure per metric: make bench pipes each of its runs through it.
//
//	go test ./tools/bench -run '^$' -bench . | go run ./tools/figures/bench
package main

import (
	"bufio"
	"fmt"
	"os"

	"github.com/kos-sdn/kos/tools/figures"
)

func main() {
	path := os.Getenv(figures.Env)
	if path == "" {
		fmt.Fprintf(os.Stderr, "bench: set %s to the figures file to append to\n", figures.Env)
		os.Exit(2)
	}
	var p figures.BenchParser
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	failed := false
	for sc.Scan() {
		fmt.Println(sc.Text())
		if figs := p.Line(sc.Text()); len(figs) > 0 {
			if err := figures.Append(path, figs...); err != nil {
				fmt.Fprintf(os.Stderr, "bench: %v\n", err)
				failed = true
			}
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: reading: %v\n", err)
		failed = true
	}
	if failed {
		os.Exit(1)
	}
}

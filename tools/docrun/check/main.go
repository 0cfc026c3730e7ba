// Command check fails when a block of the docs marked to run (tools/
// docrun) runs in no test: when no test of the folders it is given names,
// as a Go string, one of the headings the block is under (a test runs a
// section with docrun.Section(page, heading)). make verify runs it on docs/
// against tools/e2e.
//
//	go run ./tools/docrun/check -tests tools/e2e docs/*.md
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/kos-sdn/kos/tools/docrun"
)

func main() {
	tests := flag.String("tests", "tools/e2e", "comma-separated folders whose _test.go files run the docs' blocks")
	flag.Parse()
	var sources strings.Builder
	for _, dir := range strings.Split(*tests, ",") {
		files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
		if err != nil {
			fail(err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				fail(err)
			}
			sources.Write(data)
		}
	}
	named := func(heading string) bool { return strings.Contains(sources.String(), strconv.Quote(heading)) }
	missing := 0
	for _, page := range flag.Args() {
		blocks, err := docrun.All(page)
		if err != nil {
			fail(err)
		}
		for _, b := range blocks {
			ran := false
			for _, h := range b.Headings {
				ran = ran || named(h)
			}
			if !ran {
				fmt.Fprintf(os.Stderr, "check: %s: a block marked to run runs in no test: no test of %s names one of %q\n", b, *tests, b.Headings)
				missing++
			}
		}
	}
	if missing > 0 {
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "check: %v\n", err)
	os.Exit(1)
}

package main

import (
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kos-sdn/kos/tools/kosimages/catalog"
)

// TestDockerfile keeps the Dockerfile for container engines in step with the
// catalog: a target per image, holding the same commands in the same place
// with the same entrypoint.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("dockerfiles/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stages := dockerStages(string(data))
	build, ok := stages["build"]
	if !ok {
		t.Fatal("no build stage")
	}
	for _, name := range append([]string{catalog.Etcd}, catalog.Components...) {
		stage, ok := stages[name]
		if !ok {
			t.Errorf("no target %s", name)
			continue
		}
		entrypoint := `ENTRYPOINT ["/usr/local/bin/` + name + `"]`
		if !strings.Contains(stage, entrypoint) {
			t.Errorf("target %s: no %s", name, entrypoint)
		}
		if name == catalog.Etcd {
			continue
		}
		spec, err := catalog.Spec(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, pkg := range spec.Packages {
			bin := path.Base(pkg)
			if !strings.Contains(build, "./cmd/"+bin) {
				t.Errorf("the build stage does not build ./cmd/%s", bin)
			}
			if !regexp.MustCompile(`(?m)^COPY --from=build .*/out/` + bin + `\b.* /usr/local/bin/$`).MatchString(stage) {
				t.Errorf("target %s does not copy %s into /usr/local/bin/", name, bin)
			}
		}
		// Debian's openvswitch-switch holds every Open vSwitch program
		// and the schema (with openvswitch-common, which it depends on).
		for _, p := range append(slices.Clone(spec.HostPrograms), spec.HostFiles...) {
			if !strings.Contains(stage, p) && !strings.Contains(stage, "openvswitch-switch") {
				t.Errorf("target %s has no %s", name, p)
			}
		}
	}
}

// dockerStages splits a Dockerfile into its stages, by name.
func dockerStages(dockerfile string) map[string]string {
	stages := map[string]string{}
	from := regexp.MustCompile(`(?m)^FROM \S+ AS (\S+)$`)
	locs := from.FindAllStringSubmatchIndex(dockerfile, -1)
	for i, loc := range locs {
		end := len(dockerfile)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		stages[dockerfile[loc[2]:loc[3]]] = dockerfile[loc[0]:end]
	}
	return stages
}

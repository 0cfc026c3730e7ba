package images_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kos-sdn/kos/tools/cluster"
	"github.com/kos-sdn/kos/tools/images"
)

// TestIntegrationImport imports images built here into a real containerd
// and checks that containerd holds exactly them, unpacked and ready to run.
func TestIntegrationImport(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	opts := images.GoOptions{OutDir: filepath.Join(dir, "bin")}
	pause, err := images.Pause(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	goImage, err := images.GoImage(ctx, opts, images.Config{Cmd: []string{"--listen", ":8080"}},
		"github.com/kos-sdn/kos/tools/cluster/clustertest/hello")
	if err != nil {
		t.Fatal(err)
	}
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	files, err := images.HostBinaries(ctx, truePath)
	if err != nil {
		t.Fatal(err)
	}
	layer, err := images.Layer(files)
	if err != nil {
		t.Fatal(err)
	}
	host, err := images.New(images.Config{Entrypoint: []string{truePath}}, layer)
	if err != nil {
		t.Fatal(err)
	}
	tagged := map[string]v1.Image{
		images.PauseTag:                    pause,
		"kos.example.com/test/hello:v1":    goImage,
		"kos.example.com/test/true:v1":     host,
		"kos.example.com/test/true:latest": host,
	}
	tarball := filepath.Join(dir, "images.tar")
	if err := images.Write(tarball, tagged); err != nil {
		t.Fatal(err)
	}

	cd, err := cluster.StartContainerd(ctx, cluster.ContainerdOptions{Dir: filepath.Join(dir, "containerd")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cd.Stop(); err != nil {
			t.Errorf("stopping containerd: %v", err)
		}
	})
	if err := cd.Import(ctx, tarball); err != nil {
		t.Fatal(err)
	}

	// containerd writes its own manifest for an image it imports from a
	// docker-format tarball, but that manifest must name our config and
	// our layers, byte for byte (by digest).
	type contents struct {
		Config string
		Layers []string
	}
	want := map[string]contents{}
	for tag, img := range tagged {
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		c := contents{Config: m.Config.Digest.String()}
		for _, l := range m.Layers {
			c.Layers = append(c.Layers, l.Digest.String())
		}
		want[tag] = c
	}
	got := map[string]contents{}
	for _, row := range ctrTable(ctx, t, cd.Address, "images", "list") {
		if _, ok := tagged[row["REF"]]; !ok {
			continue
		}
		var m struct {
			Config struct{ Digest string }
			Layers []struct{ Digest string }
		}
		if err := json.Unmarshal(ctr(ctx, t, cd.Address, "content", "get", row["DIGEST"]), &m); err != nil {
			t.Fatalf("manifest of %s: %v", row["REF"], err)
		}
		c := contents{Config: m.Config.Digest}
		for _, l := range m.Layers {
			c.Layers = append(c.Layers, l.Digest)
		}
		got[row["REF"]] = c
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("images in containerd (-want +got):\n%s", diff)
	}

	// Imported images are unpacked into the default snapshotter, as the CRI
	// plugin needs them.
	checked := 0
	for _, row := range ctrTable(ctx, t, cd.Address, "images", "check") {
		if _, ok := tagged[row["REF"]]; !ok {
			continue
		}
		checked++
		// Such as "complete (2/2)": the manifest, config and layers
		// are all there.
		if !strings.HasPrefix(row["STATUS"], "complete") || row["UNPACKED"] != "true" {
			t.Errorf("image %s: status %q, unpacked %q; want complete and unpacked", row["REF"], row["STATUS"], row["UNPACKED"])
		}
	}
	if checked != len(tagged) {
		t.Errorf("ctr images check listed %d of the %d images", checked, len(tagged))
	}
}

// ctr runs ctr in the CRI namespace and returns its standard output.
func ctr(ctx context.Context, t *testing.T, address string, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", address, "--namespace", images.CRINamespace}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ctr %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// ctrTable runs ctr and returns the rows of the table it prints, keyed by
// column heading. Cells may hold spaces (sizes such as "1.1 MiB"): each
// column starts where its heading does.
func ctrTable(ctx context.Context, t *testing.T, address string, args ...string) []map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(string(ctr(ctx, t, address, args...)), "\n"), "\n")
	type column struct {
		name  string
		start int
	}
	var columns []column
	head := lines[0]
	for i := 0; i < len(head); {
		if head[i] == ' ' {
			i++
			continue
		}
		j := strings.IndexByte(head[i:], ' ')
		if j < 0 {
			j = len(head) - i
		}
		columns = append(columns, column{head[i : i+j], i})
		i += j
	}
	var rows []map[string]string
	for _, line := range lines[1:] {
		row := map[string]string{}
		for k, c := range columns {
			end := len(line)
			if k+1 < len(columns) && columns[k+1].start < end {
				end = columns[k+1].start
			}
			if c.start < end {
				row[c.name] = strings.TrimSpace(line[c.start:end])
			}
		}
		rows = append(rows, row)
	}
	return rows
}

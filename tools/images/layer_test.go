package images

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// header is what the tests compare of a tar entry.
type header struct {
	Name     string
	Type     byte
	Mode     int64
	Size     int64
	Linkname string
	Content  string
	Owner    [2]int
	ModTime  time.Time
}

// readLayer returns the entries of a layer's uncompressed archive.
func readLayer(t *testing.T, l v1.Layer) []header {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatalf("opening the layer: %v", err)
	}
	defer rc.Close()
	var got []header
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return got
		}
		if err != nil {
			t.Fatalf("reading the layer: %v", err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("reading %s: %v", hdr.Name, err)
		}
		got = append(got, header{
			Name: hdr.Name, Type: hdr.Typeflag, Mode: hdr.Mode, Size: hdr.Size, Linkname: hdr.Linkname,
			Content: string(data), Owner: [2]int{hdr.Uid, hdr.Gid}, ModTime: hdr.ModTime.UTC(),
		})
	}
}

func TestLayer(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o750); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("plain"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(script, link); err != nil {
		t.Fatal(err)
	}

	files := []File{
		{Path: "/usr/local/bin/script", Source: script},
		{Path: "/etc/plain", Source: plain},
		{Path: "/usr/local/bin/followed", Source: link},
		{Path: "/etc/config.json", Data: []byte(`{}`), Mode: 0o600},
		{Path: "/bin/sh", Link: "/usr/local/bin/script"},
		{Path: "/empty", Data: []byte{}},
	}
	l, err := Layer(files)
	if err != nil {
		t.Fatal(err)
	}
	root := [2]int{0, 0}
	dirEntry := func(name string) header {
		return header{Name: name, Type: tar.TypeDir, Mode: 0o755, Owner: root, ModTime: epoch}
	}
	file := func(name, content string, mode int64) header {
		return header{Name: name, Type: tar.TypeReg, Mode: mode, Size: int64(len(content)), Content: content, Owner: root, ModTime: epoch}
	}
	want := []header{
		dirEntry("bin/"),
		{Name: "bin/sh", Type: tar.TypeSymlink, Mode: 0o777, Linkname: "/usr/local/bin/script", Owner: root, ModTime: epoch},
		file("empty", "", 0o644),
		dirEntry("etc/"),
		file("etc/config.json", "{}", 0o600),
		file("etc/plain", "plain", 0o644),
		dirEntry("usr/"),
		dirEntry("usr/local/"),
		dirEntry("usr/local/bin/"),
		file("usr/local/bin/followed", "#!/bin/sh\necho hi\n", 0o755),
		file("usr/local/bin/script", "#!/bin/sh\necho hi\n", 0o755),
	}
	if diff := cmp.Diff(want, readLayer(t, l)); diff != "" {
		t.Errorf("layer entries (-want +got):\n%s", diff)
	}

	// The same files make the same layer, whatever their order.
	again, err := Layer([]File{files[5], files[4], files[3], files[2], files[1], files[0]})
	if err != nil {
		t.Fatal(err)
	}
	d1, err := l.Digest()
	if err != nil {
		t.Fatal(err)
	}
	d2, err := again.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 {
		t.Errorf("the same files made layers %s and %s", d1, d2)
	}
}

func TestLayerErrors(t *testing.T) {
	tests := []struct {
		name  string
		files []File
		want  string
	}{
		{"relative path", []File{{Path: "etc/x", Data: []byte{}}}, `"etc/x": not an absolute file path`},
		{"root", []File{{Path: "/", Data: []byte{}}}, `"/": not an absolute file path`},
		{"twice", []File{{Path: "/x", Data: []byte{}}, {Path: "/./x", Data: []byte("2")}}, `"/./x": given twice`},
		{"no content", []File{{Path: "/x"}}, `"/x": no data, source or link`},
		{"missing source", []File{{Path: "/x", Source: "/nonexistent/kos"}}, "no such file"},
		{"file and folder", []File{{Path: "/x", Data: []byte{}}, {Path: "/x/y", Data: []byte{}}}, `"/x" is a file and a parent folder`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Layer(tt.files)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Layer: got error %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestLayerSourceIsReadWhenWritten(t *testing.T) {
	src := filepath.Join(t.TempDir(), "late")
	if err := os.WriteFile(src, []byte("early"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Layer([]File{{Path: "/late", Source: src}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, []byte("later"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := readLayer(t, l)
	if len(got) != 1 || got[0].Content != "later" {
		t.Errorf("layer entries: got %+v, want /late holding %q", got, "later")
	}
}

package images

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one entry of a layer: a regular file whose content is Data or the
// content of the host file Source, or, when Link is set, a symbolic link.
type File struct {
	// Path is the absolute path of the entry in the image.
	Path string
	// Data is the file's content; when it is nil, Source is read instead.
	Data []byte
	// Source is a host file whose content (following symbolic links) the
	// entry gets. It is read when the layer is written, not before.
	Source string
	// Link makes the entry a symbolic link to Link.
	Link string
	// Mode holds the permission bits; 0 means 0o755 for a Source that is
	// executable on the host and 0o644 otherwise.
	Mode fs.FileMode
}

// epoch dates every entry, so that layers do not depend on when or where
// they were built.
var epoch = time.Unix(0, 0).UTC()

// Layer packs files into a gzip-compressed layer. The parent folders of every
// path are added as directories (mode 0o755). Paths must be absolute and
// distinct.
func Layer(files []File) (v1.Layer, error) {
	entries, err := layerEntries(files)
	if err != nil {
		return nil, err
	}
	opener := func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeTar(pw, entries)) }()
		return pr, nil
	}
	// The compressed bytes are kept once made: the digest, the size and
	// the tarball writer would otherwise each compress the layer again.
	layer, err := tarball.LayerFromOpener(opener, tarball.WithCompressedCaching)
	if err != nil {
		return nil, fmt.Errorf("making a layer: %w", err)
	}
	return layer, nil
}

// entry is a File with its mode settled, or a parent directory.
type entry struct {
	File
	dir bool
}

// layerEntries checks files and returns them with their parent directories,
// in the order of a tar archive: every directory before what it holds.
func layerEntries(files []File) ([]entry, error) {
	seen := map[string]bool{}
	var errs []error
	var entries []entry
	for _, f := range files {
		clean := path.Clean(f.Path)
		switch {
		case !path.IsAbs(f.Path) || clean == "/":
			errs = append(errs, fmt.Errorf("%q: not an absolute file path", f.Path))
			continue
		case seen[clean]:
			errs = append(errs, fmt.Errorf("%q: given twice", f.Path))
			continue
		case f.Link == "" && f.Data == nil && f.Source == "":
			errs = append(errs, fmt.Errorf("%q: no data, source or link", f.Path))
			continue
		}
		seen[clean] = true
		f.Path = clean
		if f.Mode == 0 {
			f.Mode = 0o644
			if f.Link == "" && f.Data == nil {
				info, err := os.Stat(f.Source)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				if info.Mode()&0o111 != 0 {
					f.Mode = 0o755
				}
			}
		}
		entries = append(entries, entry{File: f})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("layer files: %w", err)
	}
	dirs := map[string]bool{}
	for _, e := range entries {
		for dir := path.Dir(e.Path); dir != "/" && !dirs[dir]; dir = path.Dir(dir) {
			if seen[dir] {
				return nil, fmt.Errorf("layer files: %q is a file and a parent folder", dir)
			}
			dirs[dir] = true
		}
	}
	for dir := range dirs {
		entries = append(entries, entry{File: File{Path: dir, Mode: 0o755}, dir: true})
	}
	// Sorting by path puts every folder before its contents.
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.Path, b.Path) })
	return entries, nil
}

// writeTar writes the entries as an uncompressed tar archive.
func writeTar(w io.Writer, entries []entry) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		hdr := &tar.Header{
			Name:    strings.TrimPrefix(e.Path, "/"),
			Mode:    int64(e.Mode.Perm()),
			ModTime: epoch,
			Format:  tar.FormatPAX,
		}
		switch {
		case e.dir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
			if err := tw.WriteHeader(hdr); err != nil {
				return fmt.Errorf("writing %s: %w", e.Path, err)
			}
		case e.Link != "":
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, e.Link, 0o777
			if err := tw.WriteHeader(hdr); err != nil {
				return fmt.Errorf("writing %s: %w", e.Path, err)
			}
		case e.Data != nil:
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(e.Data))
			if err := tw.WriteHeader(hdr); err != nil {
				return fmt.Errorf("writing %s: %w", e.Path, err)
			}
			if _, err := tw.Write(e.Data); err != nil {
				return fmt.Errorf("writing %s: %w", e.Path, err)
			}
		default:
			if err := copySource(tw, hdr, e.Source); err != nil {
				return fmt.Errorf("writing %s: %w", e.Path, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("finishing the layer: %w", err)
	}
	return nil
}

// copySource writes the host file src under hdr.
func copySource(tw *tar.Writer, hdr *tar.Header, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	// A file that changed size since would make a broken archive: the tar
	// writer refuses to write more than Size bytes, and io.CopyN fails on
	// fewer.
	if _, err := io.CopyN(tw, f, info.Size()); err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	return nil
}

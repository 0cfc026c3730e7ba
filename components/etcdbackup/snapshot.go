package etcdbackup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The name of every snapshot file is FilePrefix, the UTC time the snapshot
// was taken in TimeLayout, then FileSuffix; its sidecar adds SumSuffix. The
// names sort by time.
const (
	FilePrefix = "kos-etcd-"
	FileSuffix = ".db"
	SumSuffix  = ".sha256"
	TimeLayout = "20060102T150405Z"
)

// ErrCorrupt marks a snapshot whose content does not match its hashes.
var ErrCorrupt = errors.New("snapshot is corrupt")

// Snapshot describes one snapshot file.
type Snapshot struct {
	// Name is the file's base name, such as kos-etcd-20261127T030000Z.db.
	Name string
	// Path is where the file is on this machine.
	Path string
	// Size is its length in bytes.
	Size int64
	// SHA256 is the hex SHA-256 of the whole file, as its sidecar says.
	SHA256 string
	// Revision is the etcd revision the snapshot holds; 0 when unknown.
	Revision int64
	// Version is the version of the etcd member that took it; "" when
	// unknown.
	Version string
	// Sidecar reports whether a sidecar file vouched for SHA256; a
	// snapshot without one was checked against etcd's own hash only.
	Sidecar bool
}

// Name returns the snapshot file name for a snapshot taken at t.
func Name(t time.Time) string {
	return FilePrefix + t.UTC().Format(TimeLayout) + FileSuffix
}

// IsName reports whether name is a snapshot file name that Name makes.
func IsName(name string) bool {
	stamp, ok := strings.CutPrefix(name, FilePrefix)
	if !ok {
		return false
	}
	stamp, ok = strings.CutSuffix(stamp, FileSuffix)
	if !ok {
		return false
	}
	_, err := time.Parse(TimeLayout, stamp)
	return err == nil
}

// Save streams a snapshot from etcd into dir as Name(now), with its sidecar.
// The file appears complete or not at all: it is written under a temporary
// name, synced, checked against the SHA-256 etcd appends to it, and only
// then renamed; the sidecar is in place before the snapshot is. An existing
// snapshot of the same name is never replaced.
func Save(ctx context.Context, m clientv3.Maintenance, dir string, now time.Time) (Snapshot, error) {
	name := Name(now)
	final := filepath.Join(dir, name)
	if _, err := os.Lstat(final); err == nil {
		return Snapshot{}, fmt.Errorf("saving snapshot: %s exists already", final)
	}
	resp, err := m.SnapshotWithVersion(ctx)
	if err != nil {
		return Snapshot{}, fmt.Errorf("requesting a snapshot from etcd: %w", err)
	}
	defer resp.Snapshot.Close()

	tmp, err := os.CreateTemp(dir, ".partial-"+name+"-*")
	if err != nil {
		return Snapshot{}, fmt.Errorf("saving snapshot: %w", err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, resp.Snapshot); err != nil {
		return Snapshot{}, fmt.Errorf("receiving the snapshot from etcd: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return Snapshot{}, fmt.Errorf("saving snapshot: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return Snapshot{}, fmt.Errorf("saving snapshot: %w", err)
	}
	snap, err := check(tmp.Name())
	if err != nil {
		return Snapshot{}, fmt.Errorf("the snapshot etcd sent: %w", err)
	}
	snap.Name, snap.Path = name, final
	snap.Revision = resp.Header.GetRevision()
	snap.Version = resp.Version
	if err := writeAtomic(final+SumSuffix, []byte(sumLine(snap.SHA256, name))); err != nil {
		return Snapshot{}, fmt.Errorf("saving snapshot: %w", err)
	}
	if err := os.Rename(tmp.Name(), final); err != nil {
		os.Remove(final + SumSuffix)
		return Snapshot{}, fmt.Errorf("saving snapshot: %w", err)
	}
	done = true
	snap.Sidecar = true
	return snap, syncDir(dir)
}

// Verify checks the snapshot file at path before anything uses it: the
// SHA-256 etcd appended must match the database it follows, and the file's
// SHA-256 must match its sidecar when there is one. A mismatch is an error
// that wraps ErrCorrupt.
func Verify(path string) (Snapshot, error) {
	snap, err := check(path)
	if err != nil {
		return Snapshot{}, err
	}
	snap.Name, snap.Path = filepath.Base(path), path
	data, err := os.ReadFile(path + SumSuffix)
	if errors.Is(err, fs.ErrNotExist) {
		return snap, nil
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("reading the sidecar of %s: %w", path, err)
	}
	want, _, _ := strings.Cut(strings.TrimSpace(string(data)), " ")
	if want != snap.SHA256 {
		return Snapshot{}, fmt.Errorf("%s: its SHA-256 is %s, its sidecar says %s: %w", path, snap.SHA256, want, ErrCorrupt)
	}
	snap.Sidecar = true
	return snap, nil
}

// check reads the snapshot file at path once: its size, the SHA-256 of the
// whole file, and whether the last sha256.Size bytes are the SHA-256 of the
// rest, as etcd writes them.
func check(path string) (Snapshot, error) {
	f, err := os.Open(path)
	if err != nil {
		return Snapshot{}, fmt.Errorf("reading snapshot: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return Snapshot{}, fmt.Errorf("reading snapshot: %w", err)
	}
	size := info.Size()
	// etcd's database is a whole number of 512-byte pages; the hash
	// follows it.
	if size < 512+sha256.Size || (size-sha256.Size)%512 != 0 {
		return Snapshot{}, fmt.Errorf("%s: %d bytes are no etcd snapshot with its hash: %w", path, size, ErrCorrupt)
	}
	whole, db := sha256.New(), sha256.New()
	if _, err := io.Copy(io.MultiWriter(whole, db), io.LimitReader(f, size-sha256.Size)); err != nil {
		return Snapshot{}, fmt.Errorf("reading %s: %w", path, err)
	}
	tail := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, tail); err != nil {
		return Snapshot{}, fmt.Errorf("reading %s: %w", path, err)
	}
	whole.Write(tail)
	if got := db.Sum(nil); !bytes.Equal(got, tail) {
		return Snapshot{}, fmt.Errorf("%s: its database hashes to %x, etcd recorded %x: %w", path, got, tail, ErrCorrupt)
	}
	return Snapshot{Size: size, SHA256: hex.EncodeToString(whole.Sum(nil))}, nil
}

// sumLine is a line of sha256sum's output.
func sumLine(sum, name string) string { return sum + "  " + name + "\n" }

// List returns the names of the snapshot files in dir, oldest first.
func List(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing snapshots: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && IsName(e.Name()) {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}

// Prune removes all but the newest keep snapshots of dir, with their
// sidecars, and returns the paths of the snapshots it removed.
func Prune(dir string, keep int) ([]string, error) {
	if keep < 1 {
		return nil, fmt.Errorf("keeping %d snapshots: want at least 1", keep)
	}
	names, err := List(dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, name := range Oldest(names, keep) {
		path := filepath.Join(dir, name)
		// The sidecar first: a snapshot left without one is still checked
		// against etcd's own hash.
		if err := os.Remove(path + SumSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		if err := os.Remove(path); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, path)
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("pruning snapshots: %w", err)
	}
	return removed, syncDir(dir)
}

// Oldest returns the names, sorted oldest first, that fall outside the
// newest keep.
func Oldest(sorted []string, keep int) []string {
	if len(sorted) <= keep {
		return nil
	}
	return sorted[:len(sorted)-keep]
}

// Newest returns the newest snapshot of dir.
func Newest(dir string) (string, error) {
	names, err := List(dir)
	if err != nil {
		return "", err
	}
	if len(names) == 0 {
		return "", fmt.Errorf("no snapshot (%s*%s) in %s", FilePrefix, FileSuffix, dir)
	}
	return filepath.Join(dir, names[len(names)-1]), nil
}

// writeAtomic writes data to path through a synced temporary file in the
// same folder.
func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".partial-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// syncDir makes the renames in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}

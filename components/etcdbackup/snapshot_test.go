package etcdbackup

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeSnapshot returns what etcd streams for a database of pages 512-byte
// pages: the database, then its SHA-256. Only the hashes matter here, so the
// pages need not be bbolt's.
func fakeSnapshot(pages int, fill byte) []byte {
	db := bytes.Repeat([]byte{fill}, 512*pages)
	sum := sha256.Sum256(db)
	return append(db, sum[:]...)
}

// writeSnapshot writes data as the snapshot name in dir, with a sidecar
// holding sidecarSum, or the file's own SHA-256 when that is "".
func writeSnapshot(t *testing.T, dir, name string, data []byte, sidecarSum string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if sidecarSum == "" {
		sum := sha256.Sum256(data)
		sidecarSum = hex.EncodeToString(sum[:])
	}
	if err := os.WriteFile(path+SumSuffix, []byte(sumLine(sidecarSum, name)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestName(t *testing.T) {
	at := time.Date(2026, 11, 27, 3, 0, 5, 0, time.FixedZone("CET", 3600))
	got := Name(at)
	if want := "kos-etcd-20261127T020005Z.db"; got != want {
		t.Errorf("Name(%s) = %q, want %q", at, got, want)
	}
	for _, tc := range []struct {
		name string
		want bool
	}{
		{got, true},
		{"kos-etcd-20261127T020005Z.db.sha256", false},
		{".partial-kos-etcd-20261127T020005Z.db-123", false},
		{"kos-etcd-latest.db", false},
		{"other-20261127T020005Z.db", false},
	} {
		if got := IsName(tc.name); got != tc.want {
			t.Errorf("IsName(%q) = %t, want %t", tc.name, got, tc.want)
		}
	}
}

func TestPrune(t *testing.T) {
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		snapshots int
		keep      int
		wantLeft  int
	}{
		{name: "fewer than keep", snapshots: 2, keep: 4, wantLeft: 2},
		{name: "exactly keep", snapshots: 4, keep: 4, wantLeft: 4},
		{name: "more than keep", snapshots: 7, keep: 3, wantLeft: 3},
		{name: "keep one", snapshots: 5, keep: 1, wantLeft: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var names []string
			// Written newest first, so that order on disk does not
			// stand in for order in time.
			for i := tc.snapshots - 1; i >= 0; i-- {
				name := Name(base.Add(time.Duration(i) * 6 * time.Hour))
				writeSnapshot(t, dir, name, fakeSnapshot(1, byte(i)), "")
				names = append([]string{name}, names...)
			}
			// Files that are no snapshots stay.
			for _, other := range []string{"README", ".partial-" + names[0] + "-1"} {
				if err := os.WriteFile(filepath.Join(dir, other), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}

			removed, err := Prune(dir, tc.keep)
			if err != nil {
				t.Fatalf("Prune: %v", err)
			}
			var wantRemoved []string
			for _, name := range names[:tc.snapshots-tc.wantLeft] {
				wantRemoved = append(wantRemoved, filepath.Join(dir, name))
			}
			if diff := cmp.Diff(removed, wantRemoved); diff != "" {
				t.Errorf("removed (-got +want):\n%s", diff)
			}
			var want []string
			for _, name := range names[tc.snapshots-tc.wantLeft:] {
				want = append(want, name, name+SumSuffix)
			}
			want = append(want, ".partial-"+names[0]+"-1", "README")
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range entries {
				got = append(got, e.Name())
			}
			slices.Sort(want)
			if diff := cmp.Diff(got, want); diff != "" {
				t.Errorf("files left (-got +want):\n%s", diff)
			}
		})
	}
}

func TestPruneRefusesKeepingNone(t *testing.T) {
	if _, err := Prune(t.TempDir(), 0); err == nil {
		t.Error("Prune(dir, 0) succeeded, want an error")
	}
}

func TestVerify(t *testing.T) {
	good := fakeSnapshot(4, 'a')
	flipped := append([]byte(nil), good...)
	flipped[700] ^= 1
	for _, tc := range []struct {
		name        string
		data        []byte
		sidecar     string // "" writes the right one; "none" writes none
		wantCorrupt bool
		wantSidecar bool
	}{
		{name: "good", data: good, wantSidecar: true},
		{name: "good without sidecar", data: good, sidecar: "none"},
		{name: "bit flipped", data: flipped, wantCorrupt: true},
		{name: "bit flipped without sidecar", data: flipped, sidecar: "none", wantCorrupt: true},
		{name: "sidecar disagrees", data: good, sidecar: strings.Repeat("0", 64), wantCorrupt: true},
		{name: "truncated", data: good[:len(good)-100], wantCorrupt: true},
		{name: "no etcd hash", data: good[:512*4], sidecar: "none", wantCorrupt: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			name := Name(time.Now())
			path := writeSnapshot(t, dir, name, tc.data, tc.sidecar)
			if tc.sidecar == "none" {
				os.Remove(path + SumSuffix)
			}
			snap, err := Verify(path)
			if tc.wantCorrupt {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Verify = %v, want an error wrapping ErrCorrupt", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			sum := sha256.Sum256(tc.data)
			want := Snapshot{Name: name, Path: path, Size: int64(len(tc.data)), SHA256: hex.EncodeToString(sum[:]), Sidecar: tc.wantSidecar}
			if diff := cmp.Diff(snap, want); diff != "" {
				t.Errorf("Verify (-got +want):\n%s", diff)
			}
		})
	}
}

// TestRestoreRefuses checks that a restore that cannot be done changes
// nothing: neither the data folder nor anything beside it.
func TestRestoreRefuses(t *testing.T) {
	good := fakeSnapshot(4, 'a')
	corrupt := append([]byte(nil), good...)
	corrupt[10] ^= 1
	for _, tc := range []struct {
		name string
		data []byte
		// sidecar is the sum its sidecar holds; "" is the file's own, so
		// that only etcd's hash can tell a damaged file.
		sidecar  string
		existing bool // the data folder holds data
		replace  bool
		wantErr  string
	}{
		{name: "corrupt into empty", data: corrupt, wantErr: "snapshot is corrupt"},
		{name: "sidecar disagrees", data: good, sidecar: strings.Repeat("1", 64), wantErr: "its sidecar says"},
		{name: "corrupt over data, replacing", data: corrupt, existing: true, replace: true, wantErr: "snapshot is corrupt"},
		{name: "good over data", data: good, existing: true, wantErr: "holds data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			backups := filepath.Join(dir, "backups")
			if err := os.Mkdir(backups, 0o700); err != nil {
				t.Fatal(err)
			}
			path := writeSnapshot(t, backups, Name(time.Now()), tc.data, tc.sidecar)
			dataDir := filepath.Join(dir, "data")
			if tc.existing {
				if err := os.MkdirAll(filepath.Join(dataDir, "member"), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			before := tree(t, dir)
			_, err := Restore(RestoreOptions{
				Snapshot:       path,
				DataDir:        dataDir,
				Name:           "m0",
				PeerURLs:       []string{"http://127.0.0.1:2380"},
				InitialCluster: "m0=http://127.0.0.1:2380",
				Replace:        tc.replace,
			}, time.Now())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Restore = %v, want an error saying %q", err, tc.wantErr)
			}
			if diff := cmp.Diff(tree(t, dir), before); diff != "" {
				t.Errorf("files after a refused restore (-got +want):\n%s", diff)
			}
		})
	}
}

// tree lists every path under dir.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(dir, func(path string, _ os.DirEntry, err error) error {
		paths = append(paths, path)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return paths
}

func TestMainExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{name: "no command", args: nil, want: ExitUsage},
		{name: "unknown command", args: []string{"backup"}, want: ExitUsage},
		{name: "unknown flag", args: []string{"save", "--no-such-flag"}, want: ExitUsage},
		{name: "missing settings", args: []string{"save"}, want: ExitUsage},
		{name: "positional argument", args: []string{"defrag", "--endpoints", "http://127.0.0.1:1", "extra"}, want: ExitUsage},
		{name: "restore without snapshot", args: []string{"restore", "--from", "/nonexistent", "--data-dir", "/tmp/x",
			"--name", "m0", "--initial-cluster", "m0=http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380"}, want: ExitError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			got := Main(t.Context(), tc.args, &stdout, &stderr)
			if got != tc.want {
				t.Errorf("exit code %d, want %d; stderr: %s", got, tc.want, stderr.String())
			}
			if lines := strings.Count(stderr.String(), "\n"); lines != 1 {
				t.Errorf("stderr has %d lines, want 1 error line: %q", lines, stderr.String())
			}
		})
	}
}

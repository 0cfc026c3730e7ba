package etcdbackup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// RestoreOptions say which member's data folder to make from which snapshot.
// Every member of a cluster is restored from the same snapshot with the same
// InitialCluster and ClusterToken, each with its own Name and PeerURLs.
type RestoreOptions struct {
	// Snapshot is the snapshot file; Restore verifies it first.
	Snapshot string
	// DataDir is the member's --data-dir. It must not be a mount point:
	// the restored folder is made beside it and renamed into place.
	DataDir string
	// Name, PeerURLs, InitialCluster and ClusterToken are the member's
	// --name, --initial-advertise-peer-urls, --initial-cluster and
	// --initial-cluster-token.
	Name           string
	PeerURLs       []string
	InitialCluster string
	ClusterToken   string
	// RevisionBump raises the revision past any a client saw before the
	// restore and marks the old ones compacted, so that watchers (the
	// watch cache of kos-apiserver) start over instead of missing changes;
	// 0 restores the revision as it was.
	RevisionBump uint64
	// Replace moves a DataDir that holds data aside (to
	// DataDir.replaced-<time>) instead of refusing to restore.
	Replace bool
}

// Restored is what Restore did.
type Restored struct {
	Snapshot Snapshot
	// MovedAside is where the data the folder held went; "" when it held
	// none.
	MovedAside string
}

// Restore makes o.DataDir from o.Snapshot. Nothing is touched before the
// snapshot passes Verify, and a data folder that holds data is kept unless
// o.Replace. The new folder is built as DataDir.restoring and renamed into
// place once complete, so a restore that fails or is killed leaves the data
// folder as it was.
func Restore(o RestoreOptions, now time.Time) (Restored, error) {
	snap, err := Verify(o.Snapshot)
	if err != nil {
		return Restored{}, fmt.Errorf("refusing to restore; nothing was changed: %w", err)
	}
	holdsData, err := nonEmpty(o.DataDir)
	if err != nil {
		return Restored{}, err
	}
	if holdsData && !o.Replace {
		return Restored{}, fmt.Errorf("refusing to restore into %s, which holds data; move it away or replace it (--replace)", o.DataDir)
	}
	building := o.DataDir + ".restoring"
	// A folder of that name is what a killed restore left.
	if err := os.RemoveAll(building); err != nil {
		return Restored{}, fmt.Errorf("removing an unfinished restore: %w", err)
	}
	cfg := snapshot.RestoreConfig{
		SnapshotPath:        o.Snapshot,
		Name:                o.Name,
		OutputDataDir:       building,
		PeerURLs:            o.PeerURLs,
		InitialCluster:      o.InitialCluster,
		InitialClusterToken: o.ClusterToken,
		RevisionBump:        o.RevisionBump,
		MarkCompacted:       o.RevisionBump > 0,
	}
	if err := snapshot.NewV3(zap.NewNop()).Restore(cfg); err != nil {
		os.RemoveAll(building)
		return Restored{}, fmt.Errorf("restoring %s: %w", o.Snapshot, err)
	}
	r := Restored{Snapshot: snap}
	if holdsData {
		r.MovedAside = o.DataDir + ".replaced-" + now.UTC().Format(TimeLayout)
		if err := os.Rename(o.DataDir, r.MovedAside); err != nil {
			return Restored{}, fmt.Errorf("moving the old data aside: %w", err)
		}
	} else if err := os.Remove(o.DataDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Restored{}, fmt.Errorf("removing the empty data folder: %w", err)
	}
	if err := os.Rename(building, o.DataDir); err != nil {
		return Restored{}, fmt.Errorf("moving the restored data into place: %w", err)
	}
	return r, syncDir(filepath.Dir(o.DataDir))
}

// nonEmpty reports whether dir exists and holds anything.
func nonEmpty(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the data folder: %w", err)
	}
	return len(entries) > 0, nil
}

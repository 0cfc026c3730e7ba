package e2e

// This file holds TestIntegrationOperate's kos-etcd uninstalled and
// installed again: what docs/backup.md's "What survives what" says of an
// uninstall, on the cluster.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/poll"
)

// testEtcdReinstall uninstalls kos-etcd (channels delete addon kos-etcd
// --yes) and installs it again with the installed channels: the backup
// claim stays, the same claim (its UID), with every snapshot on its
// volume; the members start from their volumes, which the StatefulSet
// made and the uninstall kept, with every KOS object as it was; and a
// backup by the CronJob made again lands on the same claim beside the old
// snapshots. Restoring from the claim is not tried here: the test
// cluster's volumes are node-local, on different nodes, where
// docs/backup.md says to restore from S3 (testBackupRestore).
func (o *operate) testEtcdReinstall(t *testing.T) {
	ctx := t.Context()
	began := time.Now()
	claim, err := o.kube.CoreV1().PersistentVolumeClaims(kosinstall.Namespace).Get(ctx, backupClaim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	snapshots := o.backupSnapshots(t)
	if len(snapshots) == 0 {
		t.Fatal("no snapshot on the backup volume before the uninstall")
	}
	before := o.objects(t, "")

	out := o.channelsCLI(t, "delete", "addon", "kos-etcd", "--yes")
	if !strings.Contains(out, "PersistentVolumeClaim "+kosinstall.Namespace+"/"+backupClaim) {
		t.Errorf("channels delete addon kos-etcd does not list the backup claim as kept:\n%s", out)
	}
	poll.Until(t, 3*time.Minute, "kos-etcd's StatefulSet and CronJob to be gone", func(ctx context.Context) error {
		if _, err := o.kube.AppsV1().StatefulSets(kosinstall.Namespace).Get(ctx, "kos-etcd", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("statefulset kos-etcd: %v", err)
		}
		if _, err := o.kube.BatchV1().CronJobs(kosinstall.Namespace).Get(ctx, "kos-etcd-backup", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("cronjob kos-etcd-backup: %v", err)
		}
		return nil
	})
	kept, err := o.kube.CoreV1().PersistentVolumeClaims(kosinstall.Namespace).Get(ctx, backupClaim, metav1.GetOptions{})
	switch {
	case err != nil:
		t.Fatalf("the backup claim after kos-etcd's uninstall: %v", err)
	case kept.UID != claim.UID || kept.DeletionTimestamp != nil:
		t.Errorf("the backup claim after kos-etcd's uninstall: UID %s (was %s), deleting since %v", kept.UID, claim.UID, kept.DeletionTimestamp)
	}
	if after := o.backupSnapshots(t); !cmp.Equal(after, snapshots) {
		t.Errorf("the snapshots on the backup volume after the uninstall: %v, want %v", after, snapshots)
	}
	figures.Duration(t, "operate-etcd-uninstalled", time.Since(began))

	out = o.channelsCLI(t, append(append([]string{"apply", "channel"}, o.channels...), "--yes")...)
	if !strings.Contains(out, "kos-etcd: Installed ") {
		t.Errorf("channels apply after kos-etcd's uninstall says nothing of installing it:\n%s", out)
	}
	o.waitKOSReady(t, 3*time.Minute)
	figures.Duration(t, "operate-etcd-reinstalled-to-ready", time.Since(began))
	if diff := cmp.Diff(o.objects(t, ""), before); diff != "" {
		t.Errorf("the KOS objects after kos-etcd's uninstall and install differ (-got +want):\n%s", diff)
	}

	// The CronJob made again backs up onto the same claim.
	o.kubectl(t, "-n", kosinstall.Namespace, "create", "job", "--from=cronjob/kos-etcd-backup", "backup-after-reinstall")
	o.kubectl(t, "-n", kosinstall.Namespace, "wait", "--for=condition=Complete", "job/backup-after-reinstall", "--timeout=180s")
	after := o.backupSnapshots(t)
	if len(after) <= len(snapshots) || !slices.Equal(after[:len(snapshots)], snapshots) {
		t.Errorf("the snapshots on the backup volume after a backup of the reinstalled kos-etcd: %v, want %v and a newer one", after, snapshots)
	}
	t.Logf("the backup volume holds %d snapshots after kos-etcd's uninstall, install and a backup: %v", len(after), after)
	checkPings(t, o.guestsOf("blue"), 3, 1, time.Minute)
}

// backupSnapshots lists the snapshots on the backup claim's volume (on the
// first node, provideBackupVolume), oldest first.
func (o *operate) backupSnapshots(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(o.env.Nodes[0].HostPath(kosinstall.VolumesDir), backupVolume))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "kos-etcd-") && strings.HasSuffix(e.Name(), ".db") {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names
}

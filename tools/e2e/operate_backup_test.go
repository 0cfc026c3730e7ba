package e2e

// This file holds TestIntegrationOperate's backup and restore: a backup to
// S3 by a Job of the CronJob, its metrics, the backup volume, and
// docs/backup.md's "Restoring" run as written.

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/tools/figures"
	"github.com/kos-sdn/kos/tools/kosinstall"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// testBackupRestore backs the KOS API's data up to S3 with a Job of the
// CronJob, loses the etcd volumes, and restores them by running the shell
// blocks of docs/backup.md's "Restoring" as they are written. Every
// object comes back as it was and the guests still ping.
func (o *operate) testBackupRestore(t *testing.T) {
	ctx := t.Context()
	began := time.Now()
	// An S3 server the pods reach, and the Secret the CronJob reads.
	srv, err := testenv.StartS3At(o.t.Context(), o.t.TempDir(), o.env.Nodes[0].HostIP)
	if err != nil {
		t.Fatalf("starting the S3 server: %v", err)
	}
	o.t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			o.t.Errorf("stopping the S3 server: %v", err)
		}
	})
	if err := srv.CreateBucket(ctx, backupBucket); err != nil {
		t.Fatal(err)
	}
	endpoint := srv.Endpoint
	o.kubectl(t, "-n", kosinstall.Namespace, "create", "secret", "generic", "kos-etcd-backup-s3",
		"--from-literal=KOS_ETCD_BACKUP_S3=s3://"+backupBucket+"/"+backupPrefix,
		"--from-literal=AWS_REGION="+srv.Region,
		"--from-literal=AWS_ACCESS_KEY_ID="+srv.AccessKey,
		"--from-literal=AWS_SECRET_ACCESS_KEY="+srv.SecretKey,
		"--from-literal=S3_ENDPOINT="+endpoint)
	o.provideBackupVolume(t, backupVolume, resource.MustParse("8Gi"))

	before := o.objects(t, "")
	if len(before) < 7 {
		t.Fatalf("only %d KOS objects before the backup: %v", len(before), before)
	}
	// The backup, as docs/backup.md takes one by hand.
	o.kubectl(t, "-n", kosinstall.Namespace, "create", "job", "--from=cronjob/kos-etcd-backup", "backup-now")
	o.kubectl(t, "-n", kosinstall.Namespace, "wait", "--for=condition=Complete", "job/backup-now", "--timeout=180s")
	logs := o.kubectl(t, "-n", kosinstall.Namespace, "logs", "job/backup-now")
	t.Logf("the backup's log:\n%s", logs)
	for _, want := range []string{"saved /var/lib/kos-etcd-backup/kos-etcd-", "uploaded s3://" + backupBucket + "/" + backupPrefix + "kos-etcd-"} {
		if !strings.Contains(logs, want) {
			t.Fatalf("the backup's log does not say %q", want)
		}
	}
	figures.Duration(t, "operate-backup", time.Since(began))
	o.checkBackupMetrics(t, "backup-now")

	// The disaster: the etcd members' disks are lost. First everything
	// that writes stops, as the doc says.
	began = time.Now()
	doc := filepath.Join(o.root, "docs", "backup.md")
	o.runDoc(t, o.runbook(t, doc, "### 1. Stop everything that writes")...)
	for _, n := range o.env.Nodes {
		dir := filepath.Join(n.HostPath(kosinstall.VolumesDir), "local-"+n.Name)
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	step2 := o.runbook(t, doc, "### 2. Give every member an empty volume where it will run")
	if len(step2) != 2 {
		t.Fatalf("docs/backup.md step 2 has %d blocks to run, want 2 (the claims deleted; the members started)", len(step2))
	}
	o.runDoc(t, step2[0])
	// The volumes are made by hand here: the doc says to make them again.
	for _, n := range o.env.Nodes {
		o.kubectl(t, "delete", "pv", "local-"+n.Name, "--timeout=60s")
	}
	o.provideVolumes(t)
	o.runDoc(t, step2[1])
	o.runDoc(t, o.runbook(t, doc, "### 3. Restore each member from the same snapshot")...)
	o.runDoc(t, o.runbook(t, doc, "### 4. Start again and check")...)
	figures.Duration(t, "operate-restore", time.Since(began))
	o.waitKOSReady(t, 3*time.Minute)
	figures.Duration(t, "operate-restore-to-ready", time.Since(began))

	if diff := cmp.Diff(o.objects(t, ""), before); diff != "" {
		t.Errorf("the KOS objects after the restore differ from those backed up (-got +want):\n%s", diff)
	}
	// As docs/backup.md says, channels apply of the installed release
	// changes nothing.
	if out := o.channelsCLI(t, append(append([]string{"apply", "channel"}, o.channels...), "--yes")...); !strings.Contains(out, "No update required") {
		t.Errorf("channels apply after the restore has something to do:\n%s", out)
	}
	checkPings(t, o.guestsOf("blue"), 3, 1, time.Minute)
}

// checkBackupMetrics reads kos-pki's metrics through the kube-apiserver's
// pod proxy (as kubectl kos status does) until they report job, which
// completed, as the newest backup Job to finish and not failed, and a last
// success no older than its completion.
func (o *operate) checkBackupMetrics(t *testing.T, job string) {
	ctx := t.Context()
	j, err := o.kube.BatchV1().Jobs(kosinstall.Namespace).Get(ctx, job, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if j.Status.CompletionTime == nil {
		t.Fatalf("job %s has no completion time", job)
	}
	completed := j.Status.CompletionTime.Unix()
	pods, err := o.kube.CoreV1().Pods(kosinstall.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=kos-pki"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("no kos-pki pod (%v)", err)
	}
	pod := pods.Items[0].Name
	failed := `kos_etcd_backup_last_job_failed{cronjob="kos-etcd-backup",job_name="` + job + `"} 0`
	poll.Until(t, time.Minute, "kos-pki to export the backup "+job, func(ctx context.Context) error {
		raw, err := o.kube.CoreV1().RESTClient().Get().Namespace(kosinstall.Namespace).
			Resource("pods").SubResource("proxy").Name(pod + ":9296").Suffix("metrics").DoRaw(ctx)
		if err != nil {
			return err
		}
		var last float64
		found := false
		for _, line := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(line, `kos_etcd_backup_last_success_timestamp_seconds{cronjob="kos-etcd-backup"} `); ok {
				if last, err = strconv.ParseFloat(v, 64); err != nil {
					return err
				}
			}
			found = found || line == failed
		}
		switch {
		case !found:
			return fmt.Errorf("kos-pki's metrics lack %s", failed)
		case int64(last) < completed:
			return fmt.Errorf("kos_etcd_backup_last_success_timestamp_seconds is %.0f, before the Job completed (%d)", last, completed)
		}
		return nil
	})
}

// provideBackupVolume gives the backup claim a local volume name of size
// on the first node, in the default StorageClass the etcd volumes are in.
func (o *operate) provideBackupVolume(t *testing.T, name string, size resource.Quantity) {
	n := o.env.Nodes[0]
	if err := os.MkdirAll(filepath.Join(n.HostPath(kosinstall.VolumesDir), name), 0o755); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              kosinstall.LocalStorageClass,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				Local: &corev1.LocalVolumeSource{Path: path.Join(kosinstall.VolumesDir, name)},
			},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{n.Name},
				}}}},
			}},
		},
	}
	if _, err := o.kube.CoreV1().PersistentVolumes().Create(t.Context(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

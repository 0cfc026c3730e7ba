package monitoring

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kos-sdn/kos/components/etcdbackup/backupmetrics"
	"github.com/kos-sdn/kos/components/monitoring"
	"github.com/kos-sdn/kos/tools/poll"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestIntegrationBackupAlertsFire runs the three backup faults past a real
// Prometheus with the addon's configuration and the repository's rules
// (every "for" 0): kos-pki's backup collector reads a CronJob and its Jobs
// from a real kube-apiserver, whose statuses the test writes as the
// CronJob and Job controllers would (the environment runs no kubelet): a
// last success two days old fires KOSEtcdBackupTooOld, a failed Job
// KOSEtcdBackupFailed, a Job waiting for 40 minutes KOSEtcdBackupStuck.
// Then a newer Job completes: the first two resolve.
func TestIntegrationBackupAlertsFire(t *testing.T) {
	env := testenv.Shared(t)
	ctx := context.Background()
	kube, err := kubernetes.NewForConfig(env.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	ns := env.NewNamespace(t, "kos-monitoring-backup-")
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns))
	reg := prometheus.NewRegistry()
	reg.MustRegister(backupmetrics.NewCollector(factory, ns, "kos-etcd-backup"))
	stop := make(chan struct{})
	factory.Start(stop)
	t.Cleanup(func() { close(stop); factory.Shutdown() })
	targets := []target{{job: "kos", address: serve(t, monitoring.Handler(reg)), name: "kos-pki", port: "metrics", node: "node-a"}}

	cj, err := kube.BatchV1().CronJobs(ns).Create(ctx, &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "kos-etcd-backup"},
		Spec:       batchv1.CronJobSpec{Schedule: "17 */6 * * *", Suspend: ptr.To(true), JobTemplate: batchv1.JobTemplateSpec{Spec: jobSpec()}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cj.Status.LastSuccessfulTime = ptr.To(metav1.NewTime(time.Now().Add(-48 * time.Hour)))
	if cj, err = kube.BatchV1().CronJobs(ns).UpdateStatus(ctx, cj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	writeJob(t, kube, cj, "kos-etcd-backup-1", time.Now().Add(-50*time.Minute), batchv1.JobFailed)
	writeJob(t, kube, cj, "kos-etcd-backup-2", time.Now().Add(-40*time.Minute), "")

	files := localFiles{rules: writeFile(t, "kos.rules.yaml", rulesWithoutFor(t))}
	base := startPrometheus(t, prometheusConfig(t, configMapData(t, manifestObjects(t), "prometheus-config")["prometheus.yml"], targets, files, true))
	began := time.Now()
	for _, a := range []struct{ alert, job string }{
		{"KOSEtcdBackupTooOld", ""},
		{"KOSEtcdBackupFailed", "kos-etcd-backup-1"},
		{"KOSEtcdBackupStuck", "kos-etcd-backup-2"},
	} {
		poll.Until(t, time.Minute, a.alert+" fires", func(context.Context) error {
			return backupAlertState(base, a.alert, a.job, "firing")
		})
		t.Logf("%s fired %s after Prometheus started", a.alert, time.Since(began).Round(100*time.Millisecond))
	}

	// A newer backup completes, and the CronJob controller records it.
	writeJob(t, kube, cj, "kos-etcd-backup-3", time.Now().Add(-time.Minute), batchv1.JobComplete)
	cj.Status.LastSuccessfulTime = ptr.To(metav1.Now())
	if _, err = kube.BatchV1().CronJobs(ns).UpdateStatus(ctx, cj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	fixed := time.Now()
	for _, a := range []struct{ alert, job string }{
		{"KOSEtcdBackupTooOld", ""},
		{"KOSEtcdBackupFailed", "kos-etcd-backup-1"},
	} {
		poll.Until(t, time.Minute, a.alert+" resolves", func(context.Context) error {
			return backupAlertState(base, a.alert, a.job, "")
		})
	}
	t.Logf("KOSEtcdBackupTooOld and KOSEtcdBackupFailed resolved %s after the backup completed", time.Since(fixed).Round(100*time.Millisecond))
	if err := backupAlertState(base, "KOSEtcdBackupStuck", "kos-etcd-backup-2", "firing"); err != nil {
		t.Errorf("the Job still waiting: %v", err)
	}
}

func jobSpec() batchv1.JobSpec {
	return batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers:    []corev1.Container{{Name: "backup", Image: "kos.example.com/kos-apiserver"}},
	}}}
}

// writeJob creates a Job of cj that no controller of the environment
// manages and writes its status: started at start, then finished a minute
// later with cond (JobComplete or JobFailed), or still waiting when cond
// is empty.
func writeJob(t *testing.T, kube kubernetes.Interface, cj *batchv1.CronJob, name string, start time.Time, cond batchv1.JobConditionType) {
	t.Helper()
	ctx := context.Background()
	spec := jobSpec()
	spec.ManagedBy = ptr.To("kos.example.com/test")
	j, err := kube.BatchV1().Jobs(cj.Namespace).Create(ctx, &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "batch/v1", Kind: "CronJob", Name: cj.Name, UID: cj.UID, Controller: ptr.To(true),
		}}},
		Spec: spec,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	started, ended := metav1.NewTime(start), metav1.NewTime(start.Add(time.Minute))
	j.Status.StartTime = &started
	switch cond {
	case batchv1.JobComplete:
		j.Status.Succeeded, j.Status.CompletionTime = 1, &ended
		j.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: ended},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: ended},
		}
	case batchv1.JobFailed:
		j.Status.Failed = 1
		j.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: ended},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonBackoffLimitExceeded, LastTransitionTime: ended},
		}
	default:
		j.Status.Active = 1
	}
	if _, err := kube.BatchV1().Jobs(cj.Namespace).UpdateStatus(ctx, j, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("writing the status of job %s: %v", name, err)
	}
}

// backupAlertState returns nil when the alert of that backup Job (any, when
// job is "") is in state (firing, pending), or absent when state is "", as
// Prometheus's /api/v1/alerts says.
func backupAlertState(base, name, job, state string) error {
	data, err := promGet(base, "/api/v1/alerts", nil)
	if err != nil {
		return err
	}
	var r struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return err
	}
	var states []string
	for _, a := range r.Alerts {
		if a.Labels["alertname"] == name && a.Labels["cronjob"] == "kos-etcd-backup" && (job == "" || a.Labels["job_name"] == job) {
			states = append(states, a.State)
		}
	}
	if (state == "" && len(states) == 0) || slices.Contains(states, state) {
		return nil
	}
	return fmt.Errorf("alert %s of job %q: states %v, want %q; all alerts: %s", name, job, states, state, data)
}

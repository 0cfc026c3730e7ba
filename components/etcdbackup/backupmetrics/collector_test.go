package backupmetrics

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

var t0 = time.Date(2026, 11, 29, 6, 17, 0, 0, time.UTC)

func cronJob() *batchv1.CronJob {
	return &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Namespace: "example-com", Name: "kos-etcd-backup", UID: "cj-uid", CreationTimestamp: metav1.NewTime(t0.Add(-48 * time.Hour))},
		Spec:       batchv1.CronJobSpec{Schedule: "17 */6 * * *"},
	}
}

// job is a Job of the CronJob (owner "cj-uid") or another, created at
// created, with the condition (Complete or Failed) that finished it at
// finished, or none when finished is zero.
func job(name string, owner types.UID, created, finished time.Time, cond batchv1.JobConditionType) *batchv1.Job {
	j := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{
		Namespace: "example-com", Name: name, CreationTimestamp: metav1.NewTime(created),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "CronJob", Name: "kos-etcd-backup", UID: owner, Controller: ptr.To(true)}},
	}}
	j.Status.StartTime = ptr.To(metav1.NewTime(created.Add(time.Second)))
	if !finished.IsZero() {
		j.Status.Conditions = []batchv1.JobCondition{{Type: cond, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(finished)}}
		if cond == batchv1.JobComplete {
			j.Status.CompletionTime = ptr.To(metav1.NewTime(finished))
		}
	}
	return j
}

func TestFigures(t *testing.T) {
	h := time.Hour
	tests := []struct {
		name string
		cj   func(*batchv1.CronJob)
		jobs []*batchv1.Job
		want State
	}{{
		name: "never ran",
		want: State{},
	}, {
		name: "status only: the Jobs were deleted",
		cj:   func(cj *batchv1.CronJob) { cj.Status.LastSuccessfulTime = ptr.To(metav1.NewTime(t0)) },
		want: State{LastSuccess: t0},
	}, {
		name: "a Job completed after the status was written",
		cj:   func(cj *batchv1.CronJob) { cj.Status.LastSuccessfulTime = ptr.To(metav1.NewTime(t0)) },
		jobs: []*batchv1.Job{job("b-2", "cj-uid", t0.Add(6*h), t0.Add(6*h+time.Minute), batchv1.JobComplete)},
		want: State{LastSuccess: t0.Add(6*h + time.Minute), LastFinishedJob: "b-2"},
	}, {
		name: "the newest finished Job failed",
		jobs: []*batchv1.Job{
			job("b-1", "cj-uid", t0, t0.Add(time.Minute), batchv1.JobComplete),
			job("b-2", "cj-uid", t0.Add(6*h), t0.Add(7*h), batchv1.JobFailed),
		},
		want: State{LastSuccess: t0.Add(time.Minute), LastFinishedJob: "b-2", LastFailed: true},
	}, {
		name: "a failure followed by a success clears",
		jobs: []*batchv1.Job{
			job("b-2", "cj-uid", t0.Add(6*h), t0.Add(7*h), batchv1.JobFailed),
			job("b-3", "cj-uid", t0.Add(12*h), t0.Add(12*h+time.Minute), batchv1.JobComplete),
		},
		want: State{LastSuccess: t0.Add(12*h + time.Minute), LastFinishedJob: "b-3"},
	}, {
		name: "newest by creation, not by finish: a long retry finishing last",
		jobs: []*batchv1.Job{
			job("b-1", "cj-uid", t0, t0.Add(2*h), batchv1.JobFailed),
			job("now", "cj-uid", t0.Add(time.Minute), t0.Add(2*time.Minute), batchv1.JobComplete),
		},
		want: State{LastSuccess: t0.Add(2 * time.Minute), LastFinishedJob: "now"},
	}, {
		name: "unfinished Jobs: the oldest is reported",
		jobs: []*batchv1.Job{
			job("b-3", "cj-uid", t0.Add(12*h), time.Time{}, ""),
			job("b-2", "cj-uid", t0.Add(6*h), time.Time{}, ""),
		},
		want: State{ActiveJob: "b-2", ActiveSince: t0.Add(6*h + time.Second)},
	}, {
		name: "Jobs of another owner are ignored",
		jobs: []*batchv1.Job{
			job("other", "other-uid", t0, t0.Add(time.Minute), batchv1.JobFailed),
			job("other-running", "other-uid", t0, time.Time{}, ""),
		},
		want: State{},
	}, {
		name: "suspended",
		cj:   func(cj *batchv1.CronJob) { cj.Spec.Suspend = ptr.To(true) },
		want: State{Suspended: true},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cj := cronJob()
			if tt.cj != nil {
				tt.cj(cj)
			}
			got := Figures(cj, tt.jobs, 6*h)
			tt.want.Created, tt.want.Interval = cj.CreationTimestamp.Time, 6*h
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Figures (-want +got):\n%s", diff)
			}
		})
	}
}

func TestScheduleInterval(t *testing.T) {
	tests := []struct {
		schedule string
		want     time.Duration
		err      bool
	}{
		{schedule: "17 */6 * * *", want: 6 * time.Hour},
		{schedule: "* * * * *", want: time.Minute},
		{schedule: "@daily", want: 24 * time.Hour},
		{schedule: "0 3 * * 1-5", want: 72 * time.Hour},
		// From November 2026: 2027 is no leap year.
		{schedule: "0 0 1 1 *", want: 365 * 24 * time.Hour},
		// 2:00 does not exist on the day clocks go forward: skipped.
		{schedule: "CRON_TZ=Europe/Paris 0 2 * * *", want: 47 * time.Hour},
		{schedule: "0 0 30 2 *", err: true},
		{schedule: "every hour", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.schedule, func(t *testing.T) {
			got, err := ScheduleInterval(tt.schedule, t0)
			if (err != nil) != tt.err {
				t.Fatalf("ScheduleInterval(%q) error = %v, want error: %v", tt.schedule, err, tt.err)
			}
			if got != tt.want {
				t.Errorf("ScheduleInterval(%q) = %s, want %s", tt.schedule, got, tt.want)
			}
		})
	}
}

// TestCollector reads a CronJob and its Jobs through informers of a fake
// clientset and checks the exposition a scrape gets.
func TestCollector(t *testing.T) {
	cj := cronJob()
	cj.Status.LastSuccessfulTime = ptr.To(metav1.NewTime(t0))
	client := fake.NewClientset(cj,
		job("kos-etcd-backup-1", "cj-uid", t0.Add(6*time.Hour), t0.Add(7*time.Hour), batchv1.JobFailed),
		job("kos-etcd-backup-2", "cj-uid", t0.Add(12*time.Hour), time.Time{}, ""),
	)
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace("example-com"))
	c := NewCollector(factory, "example-com", "kos-etcd-backup")
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)

	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Errorf("before the caches synced: %d metrics (error %v), want none", n, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); factory.Shutdown() }()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	want := `
# HELP kos_etcd_backup_active_job_start_timestamp_seconds When the oldest unfinished Job of the backup CronJob started (its pod running or waiting to be scheduled), in seconds since the epoch; absent while none runs.
# TYPE kos_etcd_backup_active_job_start_timestamp_seconds gauge
kos_etcd_backup_active_job_start_timestamp_seconds{cronjob="kos-etcd-backup",job_name="kos-etcd-backup-2"} 1.795976221e+09
# HELP kos_etcd_backup_cronjob_created_timestamp_seconds When the backup CronJob was created, in seconds since the epoch: the age a backup would have had, before the first one.
# TYPE kos_etcd_backup_cronjob_created_timestamp_seconds gauge
kos_etcd_backup_cronjob_created_timestamp_seconds{cronjob="kos-etcd-backup"} 1.79576022e+09
# HELP kos_etcd_backup_last_job_failed 1 when the newest finished Job of the backup CronJob failed, 0 when it completed; absent while none has finished.
# TYPE kos_etcd_backup_last_job_failed gauge
kos_etcd_backup_last_job_failed{cronjob="kos-etcd-backup",job_name="kos-etcd-backup-1"} 1
# HELP kos_etcd_backup_last_success_timestamp_seconds When the newest backup Job of the CronJob completed, in seconds since the epoch; absent while none has.
# TYPE kos_etcd_backup_last_success_timestamp_seconds gauge
kos_etcd_backup_last_success_timestamp_seconds{cronjob="kos-etcd-backup"} 1.79593302e+09
# HELP kos_etcd_backup_schedule_interval_seconds The longest time between two runs of the backup CronJob's schedule, in seconds.
# TYPE kos_etcd_backup_schedule_interval_seconds gauge
kos_etcd_backup_schedule_interval_seconds{cronjob="kos-etcd-backup"} 21600
# HELP kos_etcd_backup_suspended 1 when the backup CronJob is suspended (it starts no Job), else 0.
# TYPE kos_etcd_backup_suspended gauge
kos_etcd_backup_suspended{cronjob="kos-etcd-backup"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}

	// Without the CronJob (kos-etcd uninstalled, or a single-node
	// release), nothing.
	if err := client.BatchV1().CronJobs("example-com").Delete(ctx, "kos-etcd-backup", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := testutil.GatherAndCount(reg)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d metrics 10 s after the CronJob was deleted, want none", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

package daemon

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/channels/install"
)

// driftTarget is a target of kind kind named name, with annotations.
func driftTarget(kind, name string, annotations map[string]string) *channels.Object {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": kind}}
	u.SetName(name)
	if kind != "Namespace" {
		u.SetNamespace("ns")
	}
	u.SetAnnotations(annotations)
	return &channels.Object{Obj: u, Key: channels.ObjectKey{GroupKind: schema.GroupKind{Kind: kind}, Namespace: u.GetNamespace(), Name: name}}
}

func TestUpToDate(t *testing.T) {
	t.Parallel()
	plan := &channels.Plan{Items: []channels.PlanItem{
		{Addon: &channels.Addon{Name: "current"}, Decision: channels.Decision{Reason: install.ReasonUpToDate}},
		{Addon: &channels.Addon{Name: "upgrade"}, Decision: channels.Decision{Apply: true, Reason: install.ReasonUpToDate}},
		{Addon: &channels.Addon{Name: "downgrade"}, Decision: channels.Decision{Reason: install.ReasonDowngrade}},
	}}
	var got []string
	for _, it := range upToDate(plan) {
		got = append(got, it.Addon.Name)
	}
	if diff := cmp.Diff(got, []string{"current"}); diff != "" {
		t.Errorf("upToDate (-got +want):\n%s", diff)
	}
}

func TestChangedTargets(t *testing.T) {
	t.Parallel()
	same := driftTarget("ConfigMap", "same", nil)
	edited := driftTarget("ConfigMap", "edited", nil)
	gone := driftTarget("ConfigMap", "gone", nil)
	relabelled := driftTarget("Namespace", "relabelled", nil)
	deleted := driftTarget("Namespace", "deleted", nil)
	st := &addonDrift{
		targets: []*channels.Object{same, edited, gone, relabelled, deleted},
		seen: map[channels.ObjectKey]string{
			same.Key: "fp1", edited.Key: "fp1", gone.Key: "fp1", relabelled.Key: "fp1", deleted.Key: "fp1",
		},
	}
	listed := map[channels.ObjectKey]listedObject{
		same.Key:       {fingerprint: "fp1"},
		edited.Key:     {fingerprint: "fp2"},
		relabelled.Key: {fingerprint: "fp2"},
	}
	var got []string
	for _, tg := range changedTargets(st, listed) {
		got = append(got, tg.Key.Name)
	}
	// A Namespace drifts only by being deleted.
	if diff := cmp.Diff(got, []string{"edited", "gone", "deleted"}); diff != "" {
		t.Errorf("changedTargets (-got +want):\n%s", diff)
	}
}

func TestLookMode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		daemon      DriftMode
		present     bool
		wantMode    DriftMode
		wantLook    bool
	}{
		{name: "report", daemon: DriftReport, present: true, wantMode: DriftReport, wantLook: true},
		{name: "repair", daemon: DriftRepair, present: true, wantMode: DriftRepair, wantLook: true},
		{name: "annotated off", annotations: map[string]string{DriftAnnotation: "off"}, daemon: DriftRepair, present: true, wantMode: DriftOff},
		{name: "annotated repair", annotations: map[string]string{DriftAnnotation: "repair"}, daemon: DriftReport, present: true, wantMode: DriftRepair, wantLook: true},
		{name: "bad annotation", annotations: map[string]string{DriftAnnotation: "fix"}, daemon: DriftReport, wantMode: DriftReport, wantLook: true},
		{name: "create-only present", annotations: map[string]string{channels.CreateOnlyAnnotation: "true"}, daemon: DriftRepair, present: true, wantMode: DriftRepair},
		{name: "create-only deleted", annotations: map[string]string{channels.CreateOnlyAnnotation: "true"}, daemon: DriftRepair, wantMode: DriftRepair, wantLook: true},
		{name: "create-only reported", annotations: map[string]string{channels.CreateOnlyAnnotation: "true"}, daemon: DriftReport, present: true, wantMode: DriftReport, wantLook: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mode, look := lookMode(driftTarget("ConfigMap", "c", tc.annotations), tc.daemon, tc.present)
			if mode != tc.wantMode || look != tc.wantLook {
				t.Errorf("lookMode = %q, %v; want %q, %v", mode, look, tc.wantMode, tc.wantLook)
			}
		})
	}
}

func TestPlanRepair(t *testing.T) {
	t.Parallel()
	person := []fieldOwner{{Manager: "kubectl-edit", Field: ".data.a"}}
	controller := []fieldOwner{{Manager: "injector", Field: ".data.b"}}
	release := func() *channels.Object {
		tg := driftTarget("ConfigMap", "c", nil)
		tg.Obj.Object["data"] = map[string]any{"a": "1", "b": "2"}
		return tg
	}
	live := release().Obj.DeepCopy()
	live.SetManagedFields(nil)
	liveWithInjector := live.DeepCopy()
	liveWithInjector.Object["metadata"].(map[string]any)["managedFields"] = []any{map[string]any{
		"manager": "injector", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
		"fieldsV1": map[string]any{"f:data": map[string]any{"f:b": map[string]any{}}},
	}}
	for _, tc := range []struct {
		name string
		f    driftFinding
		// wantHow is the how of the finding to report.
		wantHow string
		// wantFix is "" (nothing to re-apply), "whole" or "without
		// controllers" (the release without the fields controllers own).
		wantFix string
		// wantData is the data of the target to re-apply.
		wantData map[string]any
	}{
		{name: "no drift", f: driftFinding{live: live}},
		{name: "deleted", f: driftFinding{how: "deleted"}, wantFix: "whole", wantData: map[string]any{"a": "1", "b": "2"}},
		{name: "changed by a person", f: driftFinding{how: "changed", people: person, live: live}, wantFix: "whole", wantData: map[string]any{"a": "1", "b": "2"}},
		{name: "changed by no known manager", f: driftFinding{how: "changed", live: live}, wantFix: "whole", wantData: map[string]any{"a": "1", "b": "2"}},
		{name: "changed by a controller", f: driftFinding{how: "changed", controllers: controller, live: liveWithInjector}, wantHow: "changed"},
		{name: "changed by both", f: driftFinding{how: "changed", people: person, controllers: controller, live: liveWithInjector},
			wantHow: "changed", wantFix: "without controllers", wantData: map[string]any{"a": "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := release()
			report, fix, err := planRepair(tg, tc.f)
			if err != nil {
				t.Fatal(err)
			}
			if report.how != tc.wantHow {
				t.Errorf("reported how %q, want %q", report.how, tc.wantHow)
			}
			if diff := cmp.Diff(report.controllers, tc.f.controllers); diff != "" {
				t.Errorf("reported controllers (-got +want):\n%s", diff)
			}
			if len(report.people) > 0 {
				t.Errorf("reported people %v: a repair reverts their changes", report.people)
			}
			switch {
			case tc.wantFix == "" && fix != nil:
				t.Fatalf("re-applies %s; want nothing", fix.Key)
			case tc.wantFix == "":
				return
			case fix == nil:
				t.Fatal("re-applies nothing")
			case tc.wantFix == "whole" && fix != tg:
				t.Error("re-applies a copy; want the release's target")
			case tc.wantFix == "without controllers" && fix == tg:
				t.Error("re-applies the release's target; want it without the controllers' fields")
			}
			if diff := cmp.Diff(fix.Obj.Object["data"], tc.wantData); diff != "" {
				t.Errorf("data re-applied (-got +want):\n%s", diff)
			}
			if fix.Key != tg.Key {
				t.Errorf("re-applies %s, want %s", fix.Key, tg.Key)
			}
		})
	}
}

func TestRepairOutcome(t *testing.T) {
	t.Parallel()
	cm := channels.ObjectKey{GroupKind: schema.GroupKind{Kind: "ConfigMap"}, Namespace: "ns", Name: "c"}
	ns := channels.ObjectKey{GroupKind: schema.GroupKind{Kind: "Namespace"}, Name: "ns"}
	out := func(rv string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{}}
		u.SetResourceVersion(rv)
		return u
	}
	for _, tc := range []struct {
		name   string
		listed map[channels.ObjectKey]listedObject
		key    channels.ObjectKey
		out    *unstructured.Unstructured
		want   string
	}{
		{name: "lists failed", key: cm, out: out("2"), want: ""},
		{name: "deleted", listed: map[channels.ObjectKey]listedObject{}, key: cm, out: out("2"), want: "deleted"},
		{name: "changed back", listed: map[channels.ObjectKey]listedObject{cm: {resourceVersion: "1"}}, key: cm, out: out("2"), want: "changed"},
		{name: "left alone", listed: map[channels.ObjectKey]listedObject{cm: {resourceVersion: "1"}}, key: cm, out: out("1"), want: ""},
		{name: "namespace relabelled", listed: map[channels.ObjectKey]listedObject{ns: {resourceVersion: "1"}}, key: ns, out: out("2"), want: ""},
		{name: "namespace deleted", listed: map[channels.ObjectKey]listedObject{}, key: ns, out: out("2"), want: "deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := repairOutcome(tc.listed, tc.key, tc.out); got != tc.want {
				t.Errorf("repairOutcome = %q, want %q", got, tc.want)
			}
		})
	}
}

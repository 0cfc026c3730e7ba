package agent_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kos-sdn/kos/components/agent/exechook"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/tools/poll"
)

// TestIntegrationExecAllowList runs the agent on a real Open vSwitch with an
// allow-list of command forms (program and argument patterns) and two exec
// slots: commands that match run, one that names an allowed program with
// arguments no rule allows is reported and never run, and two hooks that
// hang hold both slots without keeping other attachments from becoming
// ready.
func TestIntegrationExecAllowList(t *testing.T) {
	k := newAPI(t)
	const vni = 221
	k.subnet("s1", "10.221.0.0/24", vni)
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	touch, err := exec.LookPath("touch")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	release := filepath.Join(dir, "release")
	hang := fmt.Sprintf("while [ ! -e %s ]; do sleep 0.1; done", release)

	_, fab := startOVS(t)
	cfg := agentConfig(t, k.node("a"), hostA, fab)
	cfg.ExecRules = []exechook.Rule{
		{Path: sh, Args: []string{"-c", regexp.QuoteMeta(hang)}},
		{Path: touch, Args: []string{regexp.QuoteMeta(filepath.Join(dir, "allowed-")) + "kos[0-9a-f]{12}"}},
	}
	cfg.ExecWorkers = 2
	cfg.ExecTimeout = 10 * time.Minute
	startAgent(t, cfg)

	hook := func(command ...string) func(*v1alpha1.NetworkAttachment) {
		return func(a *v1alpha1.NetworkAttachment) { a.Spec.PostCreateExec = command }
	}
	k.attachment("slow1", k.node("a"), "s1", hook(sh, "-c", hang))
	k.attachment("slow2", k.node("a"), "s1", hook(sh, "-c", hang))
	k.address("slow1", "10.221.0.5", vni)
	k.address("slow2", "10.221.0.6", vni)
	poll.Until(t, settle, "slow1 is ready", k.ready("slow1", hostA))
	poll.Until(t, settle, "slow2 is ready", k.ready("slow2", hostA))

	// Both exec slots now hang; attachments still become ready.
	k.attachment("fast", k.node("a"), "s1", hook(touch, filepath.Join(dir, "allowed-${ifname}")))
	k.attachment("denied", k.node("a"), "s1", hook(touch, filepath.Join(dir, "denied-${ifname}")))
	k.address("fast", "10.221.0.7", vni)
	k.address("denied", "10.221.0.8", vni)
	poll.Until(t, settle, "fast is ready while two hooks hang", k.ready("fast", hostA))
	poll.Until(t, settle, "denied is ready while two hooks hang", k.ready("denied", hostA))

	poll.Until(t, settle, "denied has a report", k.hasReport("denied"))
	denied := k.get("denied")
	r := denied.Status.PostCreateExecReport
	wantCommand := []string{touch, filepath.Join(dir, "denied-"+denied.Status.IfcName)}
	if r.ExitStatus != -1 || !strings.Contains(r.StdErr, "allow-list") || r.StdOut != "" || !equal(r.Command, wantCommand) {
		t.Errorf("denied's report = %+v, want command %q refused with exit status -1 and an error about the allow-list", r, wantCommand)
	}
	for _, name := range []string{"slow1", "slow2", "fast"} {
		if r := k.get(name).Status.PostCreateExecReport; r != nil {
			t.Errorf("%s has a report while both exec slots hang: %+v", name, r)
		}
		poll.Until(t, settle, name+" waits for its postCreateExec", k.readyCondition(name, metav1.ConditionFalse, v1alpha1.ReasonExecPending))
	}
	poll.Until(t, settle, "denied's postCreateExec failed", k.readyCondition("denied", metav1.ConditionFalse, v1alpha1.ReasonExecFailed))

	// Release the hanging hooks: they finish, and fast's runs.
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"slow1", "slow2", "fast"} {
		poll.Until(t, settle, name+" has a report", k.hasReport(name))
		if r := k.get(name).Status.PostCreateExecReport; r.ExitStatus != 0 {
			t.Errorf("%s's report = %+v, want exit status 0", name, r)
		}
		poll.Until(t, settle, name+" is Ready", k.readyCondition(name, metav1.ConditionTrue, v1alpha1.ReasonReady))
	}
	if _, err := os.Stat(filepath.Join(dir, "allowed-"+k.get("fast").Status.IfcName)); err != nil {
		t.Errorf("fast's postCreateExec did not run: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "denied-"+denied.Status.IfcName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("denied's postCreateExec ran (stat: %v)", err)
	}
}

func equal(a, b []string) bool {
	return strings.Join(a, "\x00") == strings.Join(b, "\x00") && len(a) == len(b)
}

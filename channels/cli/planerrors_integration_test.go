package cli

import (
	"fmt"
	"strings"
	"testing"
)

func TestIntegrationPlanShowsEveryAddonWithItsError(t *testing.T) {
	d := channelDir{t: t, dir: t.TempDir()}
	good, goodHash := d.manifest("good.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: planerr-good, namespace: default}\n")
	bad, badHash := d.manifest("bad.yaml", "apiVersion: nowhere.example.com/v1\nkind: Nothing\nmetadata: {name: planerr-bad, namespace: default}\n")
	loc := d.channel("planerr.yaml", fmt.Sprintf(`kind: Addons
metadata: {name: planerr}
spec:
  addons:
  - {name: planerr-bad, version: 1.0.0, selector: {k8s-addon: planerr-bad}, manifest: %s, manifestHash: %s}
  - {name: planerr-good, version: 1.0.0, selector: {k8s-addon: planerr-good}, manifest: %s, manifestHash: %s}
`, bad, badHash, good, goodHash))

	code, out, errOut := runCLI(t, "apply", "channel", loc)
	if code != 1 {
		t.Errorf("exit %d, want 1; stderr %q", code, errOut)
	}
	for _, want := range []string{
		"planerr-bad ", "planerr-good ",
		"planerr-good: create ConfigMap default/planerr-good\n",
		"planerr-bad: error: Nothing.nowhere.example.com default/planerr-bad: ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "nothing was changed") {
		t.Errorf("stderr %q, want the hint that nothing was changed", errOut)
	}
}

package install

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// FuzzParseRecord feeds arbitrary annotation values to the install-record
// parser. It must never panic; a record it accepts encodes as compact JSON
// that parses to the same record and encodes to the same text again; and
// kOps's reading of that text (the five fields it knows) agrees with ours.
func FuzzParseRecord(f *testing.F) {
	for _, s := range []string{
		`{"version":"0.2.0","channel":"s3://b/kos/bootstrap-channel.yaml","id":"k8s-1.29","manifestHash":"0a1b","systemGeneration":1}`,
		`{"version":"1.6","channel":"https://example.com/c?a=1&b=<2>"}`,
		`{"manifestHash":"abc","systemGeneration":2,"unknown":{"x":[1,2]}}`,
		`{"version":"0.1.0","inventory":{"kinds":["Deployment.apps","ConfigMap"],"namespaces":["example-com"],"identity":"channels.kos.example.com/addon=kos-etcd"}}`,
		`{"version":"not-semver"}`,
		` `, `null`, `[]`, `{"version":1}`, `{"inventory":null}`, "{\"id\":\"\xff\"}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		r, err := ParseRecord(value)
		if err != nil {
			return
		}
		text, err := r.Encode()
		if err != nil {
			t.Fatalf("encoding a parsed record: %v", err)
		}
		again, err := ParseRecord(text)
		if err != nil {
			t.Fatalf("encoded record %s does not parse: %v", text, err)
		}
		if diff := cmp.Diff(r, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("record changes through encode and parse (-first +again):\n%s", diff)
		}
		text2, err := again.Encode()
		if err != nil || text2 != text {
			t.Fatalf("encoding is not stable: %q then %q (%v)", text, text2, err)
		}
		var kops struct {
			Version          *string `json:"version,omitempty"`
			Channel          *string `json:"channel,omitempty"`
			ID               string  `json:"id,omitempty"`
			ManifestHash     string  `json:"manifestHash,omitempty"`
			SystemGeneration int     `json:"systemGeneration,omitempty"`
		}
		if err := json.Unmarshal([]byte(text), &kops); err != nil {
			t.Fatalf("kOps could not read %s: %v", text, err)
		}
		if deref(kops.Version) != r.Version || deref(kops.Channel) != r.Channel || kops.ID != r.ID ||
			kops.ManifestHash != r.ManifestHash || kops.SystemGeneration != r.SystemGeneration {
			t.Fatalf("kOps reads %s differently: %+v", text, kops)
		}
	})
}

// FuzzParseInventory feeds arbitrary values to the pending-inventory parser:
// never a panic, and an accepted inventory survives encode and parse.
func FuzzParseInventory(f *testing.F) {
	f.Add(`{"kinds":["Deployment.apps","ConfigMap"],"namespaces":["example-com"],"identity":"channels.kos.example.com/addon=kos-agent"}`)
	f.Add(`{"version":"0.2.0","channel":"file:///c.yaml","id":"k8s-1.29","manifestHash":"aa","kinds":["ConfigMap"],"identity":"channels.kos.example.com/addon=a"}`)
	f.Add(`{}`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, value string) {
		inv, err := ParseInventory(value)
		if err != nil {
			return
		}
		text, err := inv.Encode()
		if err != nil {
			t.Fatalf("encoding a parsed inventory: %v", err)
		}
		again, err := ParseInventory(text)
		if err != nil {
			t.Fatalf("encoded inventory %s does not parse: %v", text, err)
		}
		if diff := cmp.Diff(inv, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("inventory changes through encode and parse (-first +again):\n%s", diff)
		}
		if !inv.Covers(again.Scope()) || !again.Covers(inv.Scope()) {
			t.Fatalf("inventory does not cover its own copy: %+v", inv)
		}
	})
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// TestInventoryCoversDuplicates keeps what FuzzParseInventory found: an
// inventory that lists a kind twice did not cover itself, and hid a kind
// another inventory adds, so that no pending inventory was written for it.
func TestInventoryCoversDuplicates(t *testing.T) {
	t.Parallel()
	dup := &Inventory{Kinds: []string{"ConfigMap", "ConfigMap"}, Namespaces: []string{"a", "a"}}
	if !dup.Covers(dup) {
		t.Error("an inventory with duplicates does not cover itself")
	}
	if dup.Covers(&Inventory{Kinds: []string{"Deployment.apps"}}) {
		t.Error("duplicates hide a new kind")
	}
	if dup.Covers(&Inventory{Namespaces: []string{"b"}}) {
		t.Error("duplicates hide a new namespace")
	}
}

package nodeovs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestIntegrationDatabase creates a database from an older schema, as an
// older Open vSwitch would have, and checks that ensureDatabase converts it
// to the installed schema once, keeping its records, then keeps it.
func TestIntegrationDatabase(t *testing.T) {
	progs, err := FindPrograms()
	if err != nil {
		t.Fatalf("Open vSwitch is needed (tools/deps.sh installs it): %v", err)
	}
	ctx := t.Context()
	dir := t.TempDir()
	db := filepath.Join(dir, "conf.db")

	if got, err := ensureDatabase(ctx, progs.DBTool, db, DefaultSchema); err != nil || got != "created" {
		t.Fatalf("ensureDatabase on no database: %q, %v; want created", got, err)
	}
	if got, err := ensureDatabase(ctx, progs.DBTool, db, DefaultSchema); err != nil || got != "kept" {
		t.Fatalf("ensureDatabase again: %q, %v; want kept", got, err)
	}

	// An older schema: another version, without the Bridge column
	// datapath_version.
	data, err := os.ReadFile(DefaultSchema)
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	schema["version"] = "8.0.0"
	delete(schema, "cksum")
	delete(schema["tables"].(map[string]any)["Bridge"].(map[string]any)["columns"].(map[string]any), "datapath_version")
	old := filepath.Join(dir, "old.ovsschema")
	data, err = json.Marshal(schema)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, data, 0o644); err != nil {
		t.Fatal(err)
	}
	olddb := filepath.Join(dir, "old.db")
	if got, err := ensureDatabase(ctx, progs.DBTool, olddb, old); err != nil || got != "created" {
		t.Fatalf("ensureDatabase from the older schema: %q, %v; want created", got, err)
	}
	if got, err := ensureDatabase(ctx, progs.DBTool, olddb, DefaultSchema); err != nil || got != "converted" {
		t.Fatalf("ensureDatabase to the installed schema: %q, %v; want converted", got, err)
	}
	if v, err := run(ctx, nil, progs.DBTool, "db-version", olddb); err != nil || v == "8.0.0" {
		t.Errorf("after conversion the database has version %q (%v), want the installed schema's", v, err)
	}
	if got, err := ensureDatabase(ctx, progs.DBTool, olddb, DefaultSchema); err != nil || got != "kept" {
		t.Fatalf("ensureDatabase after conversion: %q, %v; want kept", got, err)
	}
	if _, err := ensureDatabase(ctx, progs.DBTool, db, filepath.Join(dir, "missing.ovsschema")); err == nil {
		t.Error("ensureDatabase with a missing schema: nil error")
	}
}

package spawner

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestState(t *testing.T) {
	type state struct {
		Version   string     `json:"version"`
		Processes []*Process `json:"processes"`
	}
	path := filepath.Join(t.TempDir(), "state.json")
	var got state
	if err := ReadState(path, &got); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadState of a missing file: %v, want an error matching os.ErrNotExist", err)
	}
	want := state{Version: "v1", Processes: []*Process{{Name: "etcd", PID: 42, Binary: "/bin/etcd", Args: []string{"--name", "x"}, LogFile: "/tmp/etcd.log"}}}
	if err := WriteState(path, want); err != nil {
		t.Fatal(err)
	}
	if err := ReadState(path, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, want, cmp.AllowUnexported(Process{})); diff != "" {
		t.Errorf("read back (-got +want):\n%s", diff)
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the temporary file is left: %v", err)
	}
	if err := os.WriteFile(path, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ReadState(path, &got); err == nil {
		t.Error("ReadState of a broken file succeeded")
	}
}

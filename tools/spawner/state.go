package spawner

import (
	"encoding/json"
	"fmt"
	"os"
)

// WriteState writes v, as indented JSON, to the state file path, from which
// another program finds the processes again. The file is written whole
// under a temporary name and renamed into place, so that a reader never
// sees half of it.
func WriteState(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ReadState reads into v the state file that WriteState wrote to path. A
// missing file is an error matching os.ErrNotExist.
func ReadState(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("parsing %s: %w", path, err)
	}
	return nil
}

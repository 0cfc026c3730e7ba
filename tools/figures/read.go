package figures

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
)

// Read returns the figures of a figures file, in the order they were
// recorded. A line that does not parse is an error naming its number.
func Read(r io.Reader) ([]Figure, error) {
	var out []Figure
	scanner := bufio.NewScanner(r)
	for n := 1; scanner.Scan(); n++ {
		if len(scanner.Bytes()) == 0 {
			continue
		}
		var f Figure
		if err := json.Unmarshal(scanner.Bytes(), &f); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, f)
	}
	if err := scanner.Err(); err != nil {
		return nil, fmt.Errorf("reading figures: %w", err)
	}
	return out, nil
}

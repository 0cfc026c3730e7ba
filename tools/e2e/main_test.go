package e2e

import (
	"testing"

	"github.com/kos-sdn/kos/tools/testenv"
)

// TestMain runs the tests under testenv.Main, so that the commands they
// build (testenv.Build) are built once for the program and outlive the step
// that first asks for them: a step is a subtest, whose TempDir goes when it
// ends.
func TestMain(m *testing.M) { testenv.Main(m) }

package nodeovs

import (
	"testing"

	"github.com/kos-sdn/kos/tools/testenv"
)

// TestMain removes the kos-ovs the integration tests build (testenv.Build).
func TestMain(m *testing.M) { testenv.Main(m) }

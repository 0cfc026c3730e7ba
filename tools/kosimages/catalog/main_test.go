package catalog

import (
	"testing"

	"github.com/kos-sdn/kos/tools/testenv"
)

// TestMain stops the control plane TestIntegrationPrometheusImage starts.
func TestMain(m *testing.M) { testenv.Main(m) }

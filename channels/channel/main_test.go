package channel

import (
	"testing"

	"github.com/kos-sdn/kos/tools/testenv"
)

// TestMain stops what the integration tests start (TestIntegrationS3's S3
// server) and removes the commands testenv builds.
func TestMain(m *testing.M) { testenv.Main(m) }

package channels

import (
	"testing"

	"github.com/kos-sdn/kos/tools/testenv"
)

// env is the real control plane the TestIntegration tests of this package
// run against, started once for the package.
var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

package bench

import (
	"testing"

	"github.com/kos-sdn/kos/tools/testenv"
)

// env is the control plane every benchmark of this package runs against.
var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

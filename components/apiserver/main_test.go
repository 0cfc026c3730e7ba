package apiserver_test

import (
	"testing"

	"github.com/kos-sdn/kos/tools/testenv"
)

// env is the real control plane (etcd and kube-apiserver) the integration
// tests delegate to and register kos-apiserver with.
var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

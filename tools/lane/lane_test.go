package lane

import (
	"strings"
	"testing"
)

func TestRequire(t *testing.T) {
	tests := []struct {
		env     string
		need    Lane
		wantErr string
	}{
		{env: "", need: Cluster},
		{env: "unit", need: Unit},
		{env: "unit", need: Integration, wantErr: "the unit lane starts no etcd (KOS_TEST_LANE=unit): name the test TestIntegration*"},
		{env: "unit", need: Cluster, wantErr: "the unit lane starts no etcd"},
		{env: "integration", need: Integration},
		{env: "integration", need: Cluster, wantErr: "move the test to a package of the cluster lane"},
		{env: "cluster", need: Integration},
		{env: "cluster", need: Cluster},
		{env: "e2e", need: Unit, wantErr: `KOS_TEST_LANE="e2e" names no lane`},
	}
	for _, tt := range tests {
		t.Run(tt.env+"/"+tt.need.String(), func(t *testing.T) {
			t.Setenv(Env, tt.env)
			err := Require(tt.need, "etcd")
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Require(%v) = %v, want nil", tt.need, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Require(%v) = %v, want an error containing %q", tt.need, err, tt.wantErr)
			}
		})
	}
}

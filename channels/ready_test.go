package channels

import (
	"strings"
	"testing"
)

func TestReadiness(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		obj     string
		ready   bool
		message string
		err     string
	}{
		{
			name:  "config map",
			obj:   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: ns}\n",
			ready: true,
		},
		{
			name:    "deployment not rolled out",
			obj:     "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: ns, generation: 1}\nspec: {replicas: 2}\nstatus: {observedGeneration: 1, replicas: 2, updatedReplicas: 2, readyReplicas: 1, availableReplicas: 1}\n",
			message: "Available: 1/2",
		},
		{
			name:  "deployment rolled out",
			obj:   "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: ns, generation: 1}\nspec: {replicas: 1}\nstatus: {observedGeneration: 1, replicas: 1, updatedReplicas: 1, readyReplicas: 1, availableReplicas: 1, conditions: [{type: Available, status: \"True\"}, {type: Progressing, status: \"True\", reason: NewReplicaSetAvailable}]}\n",
			ready: true,
		},
		{
			name: "deployment past its deadline",
			obj:  "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, namespace: ns, generation: 1}\nspec: {replicas: 1}\nstatus: {observedGeneration: 1, conditions: [{type: Progressing, status: \"False\", reason: ProgressDeadlineExceeded}]}\n",
			err:  "Deployment.apps ns/d failed: Progress deadline exceeded",
		},
		{
			name:    "job running",
			obj:     "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: ns}\nspec: {parallelism: 1}\nstatus: {active: 1, startTime: \"2026-01-01T00:00:00Z\"}\n",
			message: "Job in progress. success:0, active: 1, failed: 0",
		},
		{
			name:  "job complete",
			obj:   "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j, namespace: ns}\nstatus: {succeeded: 1, conditions: [{type: Complete, status: \"True\"}]}\n",
			ready: true,
		},
		{
			name:    "api service unavailable",
			obj:     "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: v1.x.example.com}\nstatus: {conditions: [{type: Available, status: \"False\", reason: MissingEndpoints, message: endpoints for service/x in \"n\" have no addresses}]}\n",
			message: "not Available: MissingEndpoints: endpoints for service/x in \"n\" have no addresses",
		},
		{
			name:    "api service without status",
			obj:     "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: v1.x.example.com}\n",
			message: "not Available yet",
		},
		{
			name:  "api service available",
			obj:   "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: v1.x.example.com}\nstatus: {conditions: [{type: Available, status: \"True\"}]}\n",
			ready: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := DecodeObjects([]byte(tc.obj))
			if err != nil {
				t.Fatal(err)
			}
			ready, message, err := readiness(objs[0])
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("readiness error = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ready != tc.ready || message != tc.message {
				t.Errorf("readiness = %v, %q; want %v, %q", ready, message, tc.ready, tc.message)
			}
		})
	}
}

package kosapi_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	kosclient "github.com/kos-sdn/kos/components/generated/clientset/versioned"
	"github.com/kos-sdn/kos/components/kosapi"
	"github.com/kos-sdn/kos/tools/testenv"
)

// TestMain stops the control plane the integration test starts.
func TestMain(m *testing.M) { testenv.Main(m) }

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		access kosapi.Access
		want   []string
	}{
		{"aggregator", kosapi.Access{}, nil},
		{"direct, system roots", kosapi.Access{Server: "https://kos"}, nil},
		{"direct, file", kosapi.Access{Server: "https://kos", CAFile: "/ca.crt"}, nil},
		{"direct, apiservice", kosapi.Access{Server: "https://kos", CAAPIService: "v1alpha1.network.example.com"}, nil},
		{"CA without server", kosapi.Access{CAFile: "/ca.crt"}, []string{"--kos-api-ca-file and --kos-api-ca-apiservice need --kos-api-server"}},
		{"two CAs", kosapi.Access{Server: "https://kos", CAFile: "/ca.crt", CAAPIService: "v"}, []string{"give --kos-api-ca-file or --kos-api-ca-apiservice, not both"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, err := range tc.access.Validate() {
				got = append(got, err.Error())
			}
			if diff := cmp.Diff(got, tc.want); diff != "" {
				t.Errorf("Validate (-got +want):\n%s", diff)
			}
		})
	}
}

// TestIntegrationCAFromAPIService reaches a real kos-apiserver directly,
// trusting the CA bundle of its APIService in a real kube-apiserver, and
// fails to without it; the aggregator path keeps the main cluster's host.
func TestIntegrationCAFromAPIService(t *testing.T) {
	env := testenv.Shared(t)
	kos, err := env.StartKOS(context.Background(), testenv.KOSOptions{})
	if err != nil {
		t.Fatalf("starting kos-apiserver: %v", err)
	}
	ctx := context.Background()
	list := func(cfg *rest.Config) error {
		c, err := kosclient.NewForConfig(cfg)
		if err != nil {
			return err
		}
		_, err = c.NetworkV1alpha1().Subnets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 1})
		return err
	}

	direct, err := kosapi.Config(ctx, env.RESTConfig, kosapi.Access{Server: kos.URL, CAAPIService: "v1alpha1.network.example.com"})
	if err != nil {
		t.Fatalf("Config: %v", err)
	}
	if direct.Host != kos.URL {
		t.Errorf("host %q, want %q", direct.Host, kos.URL)
	}
	if err := list(direct); err != nil {
		t.Errorf("listing straight from kos-apiserver: %v", err)
	}

	untrusted, err := kosapi.Config(ctx, env.RESTConfig, kosapi.Access{Server: kos.URL})
	if err != nil {
		t.Fatalf("Config: %v", err)
	}
	if err := list(untrusted); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("listing with the system's roots: got %v, want a certificate error", err)
	}

	if _, err := kosapi.Config(ctx, env.RESTConfig, kosapi.Access{Server: kos.URL, CAAPIService: "v1.nothing.example.com"}); err == nil {
		t.Error("Config with a missing APIService succeeded")
	}

	aggregated, err := kosapi.Config(ctx, env.RESTConfig, kosapi.Access{})
	if err != nil {
		t.Fatalf("Config: %v", err)
	}
	if aggregated.Host != env.RESTConfig.Host {
		t.Errorf("host %q, want the main cluster's %q", aggregated.Host, env.RESTConfig.Host)
	}
	if err := list(aggregated); err != nil {
		t.Errorf("listing through the aggregator: %v", err)
	}
}

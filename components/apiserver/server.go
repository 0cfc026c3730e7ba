// Package apiserver is kos-apiserver: the extension API server that serves the
// KOS API group network.example.com from its own etcd, behind the main
// cluster's aggregation layer and directly to the KOS controllers and agents.
//
// It goes Options → Complete → Validate → Config → Complete → New → Run, and
// NewCommand wraps those steps in a command.
package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/apiserver/admission/noderestriction"
	"github.com/kos-sdn/kos/components/apiserver/registry/iplock"
	"github.com/kos-sdn/kos/components/apiserver/registry/networkattachment"
	"github.com/kos-sdn/kos/components/apiserver/registry/networkconfig"
	"github.com/kos-sdn/kos/components/apiserver/registry/nodenetworkpolicy"
	"github.com/kos-sdn/kos/components/apiserver/registry/subnet"
)

// Config is the configuration of kos-apiserver.
type Config struct {
	// Generic is the configuration of the generic API server underneath.
	Generic *genericapiserver.RecommendedConfig
	// AgentReads are the user names of node agents whose reads of
	// NetworkAttachments are scoped to their node
	// (noderestriction.ScopeReads); none scopes no reads.
	AgentReads []string
}

// CompletedConfig is a Config whose defaults are filled in; only Complete
// makes one, so New never runs on a half-set configuration.
type CompletedConfig struct {
	*completedConfig
}

type completedConfig struct {
	generic    genericapiserver.CompletedConfig
	agentReads []string
}

// Complete fills in the defaults of c.
func (c *Config) Complete() CompletedConfig {
	return CompletedConfig{&completedConfig{generic: c.Generic.Complete(), agentReads: c.AgentReads}}
}

// Server is a kos-apiserver ready to run.
type Server struct {
	generic *genericapiserver.GenericAPIServer
}

// New builds the server: the generic server with the KOS API group installed.
func (c CompletedConfig) New() (*Server, error) {
	generic, err := c.generic.New("kos-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, fmt.Errorf("creating the generic server: %w", err)
	}
	optsGetter := c.generic.RESTOptionsGetter
	attachments, err := networkattachment.NewStorage(Scheme, optsGetter)
	if err != nil {
		return nil, err
	}
	subnets, err := subnet.NewStorage(Scheme, optsGetter, subnet.AttachmentUsers(attachments.NetworkAttachment))
	if err != nil {
		return nil, err
	}
	var attachmentsMain rest.Storage = attachments.NetworkAttachment
	if len(c.agentReads) > 0 {
		attachmentsMain = noderestriction.ScopeReads(attachments.NetworkAttachment, c.agentReads)
	}
	locks, err := iplock.NewStorage(Scheme, optsGetter)
	if err != nil {
		return nil, err
	}
	configs, err := networkconfig.NewStorage(Scheme, optsGetter, networkconfig.CountAttachments(attachments.NetworkAttachment))
	if err != nil {
		return nil, err
	}
	nodePolicies, err := nodenetworkpolicy.NewStorage(Scheme, optsGetter)
	if err != nil {
		return nil, err
	}
	group := genericapiserver.NewDefaultAPIGroupInfo(network.GroupName, Scheme, metav1.ParameterCodec, Codecs)
	group.NegotiatedSerializer = withoutProtobuf{group.NegotiatedSerializer}
	group.VersionedResourcesStorageMap[v1alpha1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"subnets":                   subnets.Subnet,
		"subnets/status":            subnets.Status,
		"networkattachments":        attachmentsMain,
		"networkattachments/status": attachments.Status,
		"iplocks":                   locks,
		"networkconfigs":            configs.NetworkConfig,
		"networkconfigs/status":     configs.Status,
		"nodenetworkpolicies":       nodePolicies,
	}
	if err := generic.InstallAPIGroup(&group); err != nil {
		return nil, fmt.Errorf("installing the %s API group: %w", network.GroupName, err)
	}
	if ca := c.generic.SecureServing.ClientCA; ca != nil {
		// The client CA comes from a ConfigMap of the main cluster, loaded
		// some moments after the server starts; until then every client
		// certificate is ignored and its requests run as anonymous.
		err := generic.AddReadyzChecks(healthz.NamedCheck("client-ca", func(*http.Request) error {
			if len(ca.CurrentCABundleContent()) == 0 {
				return errors.New("the client CA of the main cluster is not loaded yet")
			}
			return nil
		}))
		if err != nil {
			return nil, fmt.Errorf("adding the client CA readiness check: %w", err)
		}
	}
	return &Server{generic: generic}, nil
}

// Run serves until ctx is done, then shuts down gracefully: it stops taking
// requests, drains those in flight and returns. Every goroutine the server
// started stops before Run returns.
func (s *Server) Run(ctx context.Context) error {
	return s.generic.PrepareRun().RunWithContext(ctx)
}

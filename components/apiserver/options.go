package apiserver

import (
	"fmt"
	"net"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/admission"
	mutatingadmissionpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	"k8s.io/apiserver/pkg/endpoints/openapi"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	netutils "k8s.io/utils/net"

	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/apiserver/admission/noderestriction"
	"github.com/kos-sdn/kos/components/apiserver/admission/podattachments"
	"github.com/kos-sdn/kos/components/apiserver/admission/quota"
	"github.com/kos-sdn/kos/components/apiserver/registry"
	generatedopenapi "github.com/kos-sdn/kos/components/generated/openapi"
)

// DefaultEtcdPrefix is the etcd key prefix under which kos-apiserver keeps its
// objects unless --etcd-prefix says otherwise.
const DefaultEtcdPrefix = "/kos"

// Options are the settings of kos-apiserver, as its command line gives them.
type Options struct {
	// Recommended are the generic settings of an extension API server: etcd,
	// serving, delegated authentication and authorization, audit, admission,
	// the kubeconfig of the main cluster and more.
	Recommended *genericoptions.RecommendedOptions
	// ServerRun are the generic limits and timeouts of serving.
	ServerRun *genericoptions.ServerRunOptions
	// Logs configures logging.
	Logs *logsapi.LoggingConfiguration
	// AlternateDNS are more names for the self-signed serving certificate made
	// when no certificate is given.
	AlternateDNS []string
	// AgentIdentities are the user names of node agents, whose status writes
	// to NetworkAttachments the NodeRestriction admission plugin scopes to
	// their node.
	AgentIdentities []string
	// PodAttachmentDeleters are the user names that the
	// PodAttachmentProtection admission plugin lets delete a pod's
	// NetworkAttachment: kos-controller-manager's and the garbage
	// collector's.
	PodAttachmentDeleters []string
	// EtcdReadinessGrace is how long the server stays ready while its
	// etcd checks fail (withEtcdGrace); 0 makes it unready at once.
	EtcdReadinessGrace time.Duration
	// EtcdReplayUncertainWrites sends a create or update again when etcd
	// could not tell whether it was applied, where that cannot apply it
	// twice (registry.ReplayUncertainWrites).
	EtcdReplayUncertainWrites bool
}

// NewOptions returns the default settings of kos-apiserver.
func NewOptions() *Options {
	o := &Options{
		Recommended: genericoptions.NewRecommendedOptions(DefaultEtcdPrefix, Codecs.LegacyCodec(v1alpha1.SchemeGroupVersion)),
		ServerRun:   genericoptions.NewServerRunOptions(),
		Logs:        logsapi.NewLoggingConfiguration(),

		AgentIdentities:       slices.Clone(noderestriction.DefaultAgents),
		PodAttachmentDeleters: slices.Clone(podattachments.DefaultDeleters),
		EtcdReadinessGrace:    DefaultEtcdReadinessGrace,

		EtcdReplayUncertainWrites: true,
	}
	// NodeRestriction is on by default, next to the generic plugins; it is
	// made after the flags are parsed, so it sees --agent-identities.
	noderestriction.Register(o.Recommended.Admission.Plugins, func() []string { return o.AgentIdentities })
	o.Recommended.Admission.RecommendedPluginOrder = append(o.Recommended.Admission.RecommendedPluginOrder, noderestriction.PluginName)
	// PodAttachmentProtection, on by default: a running pod's attachment
	// is deleted only by kos-controller-manager or the garbage collector.
	podattachments.Register(o.Recommended.Admission.Plugins, func() []string { return o.PodAttachmentDeleters })
	o.Recommended.Admission.RecommendedPluginOrder = append(o.Recommended.Admission.RecommendedPluginOrder, podattachments.PluginName)
	// ResourceQuota, on by default and last, so that only a request every
	// other plugin admitted is charged: the main cluster's quota admission
	// never sees a KOS object. It reads the main cluster's ResourceQuotas
	// and writes their status.
	quota.Register(o.Recommended.Admission.Plugins)
	o.Recommended.Admission.RecommendedPluginOrder = append(o.Recommended.Admission.RecommendedPluginOrder, quota.PluginName)
	o.Recommended.ExtraAdmissionInitializers = func(*genericapiserver.RecommendedConfig) ([]admission.PluginInitializer, error) {
		return []admission.PluginInitializer{quota.Initializer{}}, nil
	}
	// MutatingAdmissionPolicy, on by default since k8s.io/apiserver 0.36,
	// watches admissionregistration.k8s.io/v1 mutating policies of the main
	// cluster, which Kubernetes serves only from 1.36 on: on older clusters
	// its informers never sync and the server never becomes ready. KOS
	// relies on no such policy; --enable-admission-plugins turns it on.
	o.Recommended.Admission.DefaultOffPlugins.Insert(mutatingadmissionpolicy.PluginName)
	// Token and access reviews with the main cluster are cached as long
	// as kubelet caches them (and kube-apiserver its webhooks' answers)
	// by default, not the library's 10 s: every agent re-reviewed its
	// token and each of its questions every 10 s, 1.8 reviews per
	// attachment at 500 agents in BenchmarkAgents, on kube-apiserver and
	// in kos-apiserver's request path. A revoked role or a deleted agent
	// pod's token is honoured up to 5 min or 2 min longer; a denial is
	// still cached for 10 s only, so a new grant takes effect as soon.
	o.Recommended.Authentication.CacheTTL = 2 * time.Minute
	o.Recommended.Authorization.AllowCacheTTL = 5 * time.Minute
	// Objects are stored as v1alpha1, whatever version a client used.
	o.Recommended.Etcd.StorageConfig.EncodeVersioner = runtime.NewMultiGroupVersioner(v1alpha1.SchemeGroupVersion, schema.GroupKind{Group: v1alpha1.GroupName})
	return o
}

// Flags returns the command-line flags of kos-apiserver, by section.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	// The universal flags include --feature-gates and --emulated-version.
	o.ServerRun.AddUniversalFlags(fss.FlagSet("generic"))
	o.Recommended.Etcd.AddFlags(fss.FlagSet("etcd"))
	fss.FlagSet("etcd").DurationVar(&o.EtcdReadinessGrace, "etcd-readiness-grace", o.EtcdReadinessGrace,
		"How long /readyz keeps passing while its etcd checks fail. Every replica checks the same etcd, so without a grace an etcd blip "+
			"(a member restarting, a leader election) makes every replica unready at once and the KOS API answers 503 until the probes pass again. "+
			"0 makes the server unready as soon as a check fails. /livez checks etcd without a grace.")
	fss.FlagSet("etcd").BoolVar(&o.EtcdReplayUncertainWrites, "etcd-replay-uncertain-writes", o.EtcdReplayUncertainWrites,
		"Send a create or an update to etcd again when etcd could not tell whether it was applied (its connection to a member broke, or a leader died "+
			"with the proposal): a create whose object is then found stored with its UID passed, and an update is sent again only while the object "+
			"is still at the revision it was guarded by, so no write is applied twice. Else the client gets etcd's error (500), as with false.")
	o.Recommended.SecureServing.AddFlags(fss.FlagSet("secure serving"))
	fss.FlagSet("secure serving").StringSliceVar(&o.AlternateDNS, "alternate-dns", o.AlternateDNS,
		"More DNS names for the self-signed serving certificate made when --tls-cert-file is not given (localhost and 127.0.0.1 are always in it).")
	o.Recommended.Authentication.AddFlags(fss.FlagSet("authentication"))
	o.Recommended.Authorization.AddFlags(fss.FlagSet("authorization"))
	o.Recommended.CoreAPI.AddFlags(fss.FlagSet("main cluster"))
	o.Recommended.Admission.AddFlags(fss.FlagSet("admission"))
	fss.FlagSet("admission").StringSliceVar(&o.AgentIdentities, "agent-identities", o.AgentIdentities,
		"The user names of node agents (admission plugin "+noderestriction.PluginName+"). Such a user may write the status of a NetworkAttachment "+
			"only with credentials that name a node (a service-account token bound to a pod, Kubernetes 1.30 or later), only if the attachment is on that node, "+
			"and only its interface and postCreateExec sections; it may list and watch NetworkAttachments only by a field selector naming its node (spec.node) "+
			"or a network its node has an attachment in (status.addressVNI, spec.subnet), and get only those. "+
			"Empty, or "+noderestriction.PluginName+" disabled, turns the restriction off.")
	fss.FlagSet("admission").StringSliceVar(&o.PodAttachmentDeleters, "pod-attachment-deleters", o.PodAttachmentDeleters,
		"The user names that may delete a NetworkAttachment whose controller owner is a Pod, or change that owner reference (admission plugin "+podattachments.PluginName+"): "+
			"kos-controller-manager's and the garbage collector's of kube-controller-manager. Anyone may in a namespace being deleted.")
	o.Recommended.Audit.AddFlags(fss.FlagSet("audit"))
	o.Recommended.Features.AddFlags(fss.FlagSet("features"))
	o.Recommended.EgressSelector.AddFlags(fss.FlagSet("egress selector"))
	o.Recommended.Traces.AddFlags(fss.FlagSet("traces"))
	logsapi.AddFlags(o.Logs, fss.FlagSet("logs"))
	return fss
}

// Complete fills in the settings that follow from others.
func (o *Options) Complete() error {
	if err := o.ServerRun.Complete(); err != nil {
		return fmt.Errorf("completing the server settings: %w", err)
	}
	return nil
}

// Validate returns every problem of the settings at once.
func (o *Options) Validate() error {
	var errs []error
	errs = append(errs, o.ServerRun.Validate()...)
	errs = append(errs, o.Recommended.Validate()...)
	errs = append(errs, o.ServerRun.ComponentGlobalsRegistry.Validate()...)
	if o.EtcdReadinessGrace < 0 {
		errs = append(errs, fmt.Errorf("--etcd-readiness-grace %s: must not be negative", o.EtcdReadinessGrace))
	}
	if err := logsapi.Validate(o.Logs, nil, nil).ToAggregate(); err != nil {
		errs = append(errs, err)
	}
	return utilerrors.NewAggregate(errs)
}

// Config turns the settings into the server's configuration: it makes a
// self-signed serving certificate when none is given, and connects to the main
// cluster for delegated authentication, authorization and admission.
func (o *Options) Config() (*Config, error) {
	err := o.Recommended.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", o.AlternateDNS, []net.IP{netutils.ParseIPSloppy("127.0.0.1")})
	if err != nil {
		return nil, fmt.Errorf("making a self-signed serving certificate: %w", err)
	}
	generic := genericapiserver.NewRecommendedConfig(Codecs)
	namer := openapi.NewDefinitionNamer(Scheme)
	generic.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(generatedopenapi.GetOpenAPIDefinitions, namer)
	generic.OpenAPIConfig.Info.Title = "KOS"
	generic.OpenAPIConfig.Info.Version = v1alpha1.SchemeGroupVersion.Version
	generic.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(generatedopenapi.GetOpenAPIDefinitions, namer)
	generic.OpenAPIV3Config.Info.Title = "KOS"
	generic.OpenAPIV3Config.Info.Version = v1alpha1.SchemeGroupVersion.Version

	if err := o.ServerRun.ApplyTo(&generic.Config); err != nil {
		return nil, fmt.Errorf("applying the server settings: %w", err)
	}
	if err := o.Recommended.ApplyTo(generic); err != nil {
		return nil, fmt.Errorf("applying the settings: %w", err)
	}
	generic.ReadyzChecks = withEtcdGrace(generic.ReadyzChecks, o.EtcdReadinessGrace, time.Now)
	if o.EtcdReplayUncertainWrites {
		generic.RESTOptionsGetter = registry.ReplayUncertainWrites(generic.RESTOptionsGetter)
	}
	if generic.FlowControl != nil && o.Recommended.Etcd.EnableWatchCache {
		generic.FlowControl = indexedWatches{generic.FlowControl}
	}
	if generic.Authorization.Authorizer != nil {
		generic.Authorization.Authorizer = collectionFirst(generic.Authorization.Authorizer)
	}
	config := &Config{Generic: generic}
	// The agents' reads are scoped where their writes are: with
	// NodeRestriction on (the k8s-1.29 releases turn it off, as their
	// tokens name no node).
	if pluginEnabled(o.Recommended.Admission, noderestriction.PluginName) {
		config.AgentReads = o.AgentIdentities
	}
	return config, nil
}

// pluginEnabled reports whether the admission plugin name runs with the
// settings a: named by --enable-admission-plugins, or on by default and not
// named by --disable-admission-plugins.
func pluginEnabled(a *genericoptions.AdmissionOptions, name string) bool {
	if slices.Contains(a.EnablePlugins, name) {
		return true
	}
	return slices.Contains(a.RecommendedPluginOrder, name) && !a.DefaultOffPlugins.Has(name) && !slices.Contains(a.DisablePlugins, name)
}

func init() {
	// The logging flags consult feature gates of their own, which must be
	// known to the server's gate before flags are parsed.
	utilruntime.Must(logsapi.AddFeatureGates(utilfeature.DefaultMutableFeatureGate))
}

// compatibilityRegistry is where the server's effective version and feature
// gates live; it is a process global of k8s.io/apiserver.
var compatibilityRegistry = compatibility.DefaultComponentGlobalsRegistry

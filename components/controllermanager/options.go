package controllermanager

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/google/uuid"
	"k8s.io/client-go/tools/clientcmd"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/kos-sdn/kos/components/controllers/attachmentliveness"
	"github.com/kos-sdn/kos/components/kosapi"
)

// DefaultMetricsBindAddress is where kos-controller-manager serves
// /metrics, /healthz and /readyz.
const DefaultMetricsBindAddress = ":9295"

// Options are the command-line settings of kos-controller-manager.
type Options struct {
	// Kubeconfig is the main cluster's kubeconfig; "" means the in-cluster
	// configuration.
	Kubeconfig string
	// QPS and Burst limit the requests to the main cluster's API server,
	// which takes the Events and the Lease.
	QPS   float32
	Burst int
	// KOSQPS and KOSBurst limit the requests to the KOS API. Each address
	// takes two (the lock and the status); kos-apiserver and its etcd take
	// a few thousand writes a second, and a lower limit than that, not the
	// server, would bound the rate of addressing.
	KOSQPS   float32
	KOSBurst int

	// KOSServer is the URL of kos-apiserver for direct access; "" reaches
	// the KOS API through the main cluster's kube-apiserver.
	KOSServer string
	// KOSCAFile is the CA bundle that signed kos-apiserver's serving
	// certificate, for direct access.
	KOSCAFile string
	// KOSCAAPIService names the APIService whose caBundle is that CA
	// bundle, for direct access without a file.
	KOSCAAPIService string

	SubnetValidatorWorkers int
	IPAMWorkers            int
	AddressEvents          bool
	PodNetworks            bool
	PodNetworkWorkers      int
	NetworkConfig          bool
	MultiNetworkPolicy     bool
	ResyncPeriod           time.Duration

	AttachmentLiveness        bool
	AgentLeaseNamespace       string
	AgentLeaseGrace           time.Duration
	AttachmentLivenessWorkers int

	MetricsAddress string

	LeaderElect                                                bool
	LeaderElectNamespace, LeaderElectName, LeaderElectIdentity string
	LeaseDuration, RenewDeadline, RetryPeriod                  time.Duration

	Logs *logsapi.LoggingConfiguration
}

// NewOptions returns the default settings of kos-controller-manager.
func NewOptions() *Options {
	return &Options{
		QPS:                    200,
		Burst:                  400,
		KOSQPS:                 5000,
		KOSBurst:               10000,
		SubnetValidatorWorkers: 2,
		IPAMWorkers:            16,
		PodNetworkWorkers:      4,
		// Off until a release grants the rights it needs (nodes, networkconfigs):
		// under 0.3.0's manifest it could only log Forbidden.
		NetworkConfig: false,
		ResyncPeriod:  10 * time.Minute,
		// On by default: without the rights to read the agents' Leases
		// (0.3.0's manifests) the manager logs that and goes on without.
		AttachmentLiveness:        true,
		AgentLeaseNamespace:       "kos-node",
		AgentLeaseGrace:           attachmentliveness.DefaultGrace,
		AttachmentLivenessWorkers: 2,
		MetricsAddress:            DefaultMetricsBindAddress,
		LeaderElect:               true,
		LeaderElectNamespace:      "example-com",
		LeaderElectName:           Component,
		LeaseDuration:             15 * time.Second,
		RenewDeadline:             10 * time.Second,
		RetryPeriod:               2 * time.Second,
		Logs:                      logsapi.NewLoggingConfiguration(),
	}
}

// Flags returns the command-line flags of kos-controller-manager, by
// section.
func (o *Options) Flags() cliflag.NamedFlagSets {
	var fss cliflag.NamedFlagSets
	fs := fss.FlagSet("API access")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Kubeconfig of the main cluster; empty means the in-cluster configuration.")
	fs.Float32Var(&o.QPS, "kube-api-qps", o.QPS, "Requests per second to the main cluster's API server (Events, the Lease).")
	fs.IntVar(&o.Burst, "kube-api-burst", o.Burst, "Requests in a burst to the main cluster's API server.")
	fs.Float32Var(&o.KOSQPS, "kos-api-qps", o.KOSQPS, "Requests per second to the KOS API; each address takes two.")
	fs.IntVar(&o.KOSBurst, "kos-api-burst", o.KOSBurst, "Requests in a burst to the KOS API.")
	fs.StringVar(&o.KOSServer, "kos-api-server", o.KOSServer, "URL of kos-apiserver, such as https://kos-apiserver.example-com.svc, for direct access; empty reaches the KOS API through the main cluster's kube-apiserver.")
	fs.StringVar(&o.KOSCAFile, "kos-api-ca-file", o.KOSCAFile, "CA bundle of kos-apiserver's serving certificate, with --kos-api-server.")
	fs.StringVar(&o.KOSCAAPIService, "kos-api-ca-apiservice", o.KOSCAAPIService, "With --kos-api-server: trust the CA bundle of this APIService of the main cluster (such as v1alpha1.network.example.com), read at start, instead of --kos-api-ca-file.")

	fs = fss.FlagSet("controllers")
	fs.IntVar(&o.SubnetValidatorWorkers, "subnet-validator-workers", o.SubnetValidatorWorkers, "Subnets validated at once.")
	fs.IntVar(&o.IPAMWorkers, "ipam-workers", o.IPAMWorkers, "Attachments given addresses at once. Each waits on two writes in turn, so they bound the rate of addressing to workers / (2 * write latency).")
	fs.BoolVar(&o.AddressEvents, "address-events", o.AddressEvents, "Record an AddressAssigned Event on every attachment given an address. Off, Events are recorded only for attachments that cannot get one: the address and the time it was written are in the attachment, and an Event per address adds a write to the main cluster for each address (at thousands a second).")
	fs.BoolVar(&o.PodNetworks, "pod-networks", o.PodNetworks, "Run the pod-network controller: give each pod bound to a node a NetworkAttachment for every entry of its k8s.v1.cni.cncf.io/networks annotation whose NetworkAttachmentDefinition is of type kos. It needs the NetworkAttachmentDefinition CRD (k8s.cni.cncf.io/v1) and the rights to list and watch pods and network-attachment-definitions in the main cluster.")
	fs.IntVar(&o.PodNetworkWorkers, "pod-network-workers", o.PodNetworkWorkers, "Pods given their attachments at once, with --pod-networks.")
	fs.BoolVar(&o.NetworkConfig, "network-config", o.NetworkConfig, "Run the network configuration controller: create the cluster's NetworkConfig \"cluster\" with every default filled in (the overlay MTU from the smallest underlay MTU that Nodes report in their network.example.com/underlay-mtu annotation, less 50), record the configuration applied in its status and report the nodes whose underlay cannot carry it. It needs the rights to list and watch nodes in the main cluster.")
	fs.BoolVar(&o.MultiNetworkPolicy, "multi-network-policy", o.MultiNetworkPolicy, "Run the MultiNetworkPolicy controller: tell in Events what each MultiNetworkPolicy (k8s.cni.cncf.io/v1beta1) applies to, and publish each KOS network's policy on each node as a NodeNetworkPolicy for its agent to enforce. It needs the MultiNetworkPolicy and NetworkAttachmentDefinition CRDs, list and watch on multi-networkpolicies, network-attachment-definitions, pods and namespaces in the main cluster, and the rights to write nodenetworkpolicies in the KOS API; without the CRD the manager logs that and runs the other controllers.")
	fs.DurationVar(&o.ResyncPeriod, "resync-period", o.ResyncPeriod, "How often every object is checked again; 0 means never.")
	fs.BoolVar(&o.AttachmentLiveness, "attachment-liveness", o.AttachmentLiveness, "Run the attachment liveness controller: mark the Ready attachments of a node whose agent stopped renewing its heartbeat Lease Ready=Unknown (reason AgentNotHeartbeating), and let the server derive Ready again once the agent is back. It needs list and watch on leases in --agent-lease-namespace of the main cluster; without them the manager logs that and runs the other controllers.")
	fs.StringVar(&o.AgentLeaseNamespace, "agent-lease-namespace", o.AgentLeaseNamespace, "Namespace of the main cluster where each kos-agent renews a Lease named after its node: the agents' own namespace.")
	fs.DurationVar(&o.AgentLeaseGrace, "agent-lease-grace", o.AgentLeaseGrace, "How long past a Lease's duration (40s from kos-agent) the attachment liveness controller waits before it marks the node's attachments.")
	fs.IntVar(&o.AttachmentLivenessWorkers, "attachment-liveness-workers", o.AttachmentLivenessWorkers, "Nodes judged at once, with --attachment-liveness.")

	fs = fss.FlagSet("metrics")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", o.MetricsAddress, "Address of /metrics, /healthz and /readyz; empty serves none.")

	fs = fss.FlagSet("leader election")
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "Run the controllers only while holding the Lease, so that one manager of several works.")
	fs.StringVar(&o.LeaderElectNamespace, "leader-elect-resource-namespace", o.LeaderElectNamespace, "Namespace of the Lease.")
	fs.StringVar(&o.LeaderElectName, "leader-elect-resource-name", o.LeaderElectName, "Name of the Lease.")
	fs.StringVar(&o.LeaderElectIdentity, "leader-elect-identity", o.LeaderElectIdentity, "Identity in the Lease; empty means the host name and a random suffix.")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", o.LeaseDuration, "How long others wait after the last renewal before they take the Lease.")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", o.RenewDeadline, "How long the leader tries to renew before it gives up leading.")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", o.RetryPeriod, "How long to wait between tries to take or renew the Lease.")
	logsapi.AddFlags(o.Logs, fss.FlagSet("logs"))
	return fss
}

// Complete fills in the settings that follow from others: without
// --leader-elect-identity, the identity is the host name and a random
// suffix.
func (o *Options) Complete() error {
	if o.LeaderElect && o.LeaderElectIdentity == "" {
		host, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("reading the host name for the leader election identity: %w", err)
		}
		o.LeaderElectIdentity = host + "_" + uuid.NewString()
	}
	return nil
}

// Validate reports every problem of the options at once.
func (o *Options) Validate() error {
	var errs []error
	if o.QPS <= 0 || o.Burst <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-qps and --kube-api-burst must be positive, got %v and %d", o.QPS, o.Burst))
	}
	if o.KOSQPS <= 0 || o.KOSBurst <= 0 {
		errs = append(errs, fmt.Errorf("--kos-api-qps and --kos-api-burst must be positive, got %v and %d", o.KOSQPS, o.KOSBurst))
	}
	if o.SubnetValidatorWorkers < 1 || o.IPAMWorkers < 1 {
		errs = append(errs, fmt.Errorf("--subnet-validator-workers and --ipam-workers must be at least 1, got %d and %d", o.SubnetValidatorWorkers, o.IPAMWorkers))
	}
	if o.PodNetworks && o.PodNetworkWorkers < 1 {
		errs = append(errs, fmt.Errorf("--pod-network-workers must be at least 1, got %d", o.PodNetworkWorkers))
	}
	if o.AttachmentLiveness {
		if o.AgentLeaseNamespace == "" {
			errs = append(errs, errors.New("--agent-lease-namespace must not be empty with --attachment-liveness"))
		}
		if o.AgentLeaseGrace <= 0 || o.AttachmentLivenessWorkers < 1 {
			errs = append(errs, fmt.Errorf("--agent-lease-grace must be positive and --attachment-liveness-workers at least 1, got %s and %d", o.AgentLeaseGrace, o.AttachmentLivenessWorkers))
		}
	}
	errs = append(errs, o.kosAccess().Validate()...)
	if o.LeaderElect && !(o.LeaseDuration > o.RenewDeadline && o.RenewDeadline > o.RetryPeriod && o.RetryPeriod > 0) {
		errs = append(errs, fmt.Errorf("leader election needs lease duration > renew deadline > retry period > 0, got %s, %s, %s", o.LeaseDuration, o.RenewDeadline, o.RetryPeriod))
	}
	return errors.Join(errs...)
}

func (o *Options) kosAccess() kosapi.Access {
	return kosapi.Access{Server: o.KOSServer, CAFile: o.KOSCAFile, CAAPIService: o.KOSCAAPIService}
}

// Config loads the kubeconfig and returns the manager's configuration. With
// --kos-api-ca-apiservice it reads that APIService from the main cluster.
func (o *Options) Config(ctx context.Context) (*Config, error) {
	kube, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("loading the main cluster's client configuration: %w", err)
	}
	kube.QPS, kube.Burst = o.QPS, o.Burst
	// The same identity, presented to kos-apiserver directly or through
	// the aggregator.
	kos, err := kosapi.Config(ctx, kube, o.kosAccess())
	if err != nil {
		return nil, err
	}
	kos.QPS, kos.Burst = o.KOSQPS, o.KOSBurst
	// No gzip from kos-apiserver: its informers stream their initial state
	// in the watch (client-go's WatchListClient), and kos-apiserver then
	// compresses every event of the watch's life, one flush at a time; on
	// the cluster's network that cost both processes CPU for nothing (about
	// 5% of kos-apiserver's at 100 agents, measured with BenchmarkAgents).
	kos.DisableCompression = true
	cfg := &Config{
		Kube:                   kube,
		KOS:                    kos,
		SubnetValidatorWorkers: o.SubnetValidatorWorkers,
		IPAMWorkers:            o.IPAMWorkers,
		AddressEvents:          o.AddressEvents,
		PodNetworks:            o.PodNetworks,
		PodNetworkWorkers:      o.PodNetworkWorkers,
		NetworkConfig:          o.NetworkConfig,
		MultiNetworkPolicy:     o.MultiNetworkPolicy,
		ResyncPeriod:           o.ResyncPeriod,
		MetricsAddress:         o.MetricsAddress,

		AttachmentLiveness:        o.AttachmentLiveness,
		AgentLeaseNamespace:       o.AgentLeaseNamespace,
		AgentLeaseGrace:           o.AgentLeaseGrace,
		AttachmentLivenessWorkers: o.AttachmentLivenessWorkers,
	}
	if o.LeaderElect {
		cfg.LeaderElection = &LeaderElection{
			Namespace: o.LeaderElectNamespace, Name: o.LeaderElectName, Identity: o.LeaderElectIdentity,
			LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod,
		}
	}
	return cfg, nil
}

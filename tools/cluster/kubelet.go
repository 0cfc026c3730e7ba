package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// kubeletPort is where kubelets serve; the node has its network namespace to
// itself, so the usual port is free there.
const kubeletPort = 10250

// kubeletConfig is the part of kubelet.config.k8s.io/v1beta1
// KubeletConfiguration the node sets. It is spelled out here rather than
// imported, to keep kubelet's module out of this one.
type kubeletConfig struct {
	Kind                        string            `json:"kind"`
	APIVersion                  string            `json:"apiVersion"`
	Address                     string            `json:"address"`
	Port                        int32             `json:"port"`
	ReadOnlyPort                int32             `json:"readOnlyPort"`
	HealthzBindAddress          string            `json:"healthzBindAddress"`
	HealthzPort                 int32             `json:"healthzPort"`
	TLSCertFile                 string            `json:"tlsCertFile"`
	TLSPrivateKeyFile           string            `json:"tlsPrivateKeyFile"`
	Authentication              kubeletAuthn      `json:"authentication"`
	Authorization               kubeletAuthz      `json:"authorization"`
	ContainerRuntimeEndpoint    string            `json:"containerRuntimeEndpoint"`
	CgroupDriver                string            `json:"cgroupDriver"`
	CgroupRoot                  string            `json:"cgroupRoot"`
	FailCgroupV1                bool              `json:"failCgroupV1"`
	FailSwapOn                  bool              `json:"failSwapOn"`
	OOMScoreAdj                 int32             `json:"oomScoreAdj"`
	PodLogsDir                  string            `json:"podLogsDir"`
	ResolvConf                  string            `json:"resolvConf"`
	ClusterDomain               string            `json:"clusterDomain"`
	ClusterDNS                  []string          `json:"clusterDNS"`
	EvictionHard                map[string]string `json:"evictionHard"`
	ImageGCHighThresholdPercent int32             `json:"imageGCHighThresholdPercent"`
	ImageGCLowThresholdPercent  int32             `json:"imageGCLowThresholdPercent"`
	RotateCertificates          bool              `json:"rotateCertificates"`
}

type kubeletAuthn struct {
	X509      kubeletX509   `json:"x509"`
	Webhook   kubeletSwitch `json:"webhook"`
	Anonymous kubeletSwitch `json:"anonymous"`
}

type kubeletX509 struct {
	ClientCAFile string `json:"clientCAFile"`
}

type kubeletSwitch struct {
	Enabled bool `json:"enabled"`
}

type kubeletAuthz struct {
	Mode string `json:"mode"`
}

// writeKubeletConfig writes the kubelet's configuration file and returns its
// path.
//
// On these machines: the cgroups are v1 without systemd (cgroupfs, and no
// failing on v1, which kubelet does by default since 1.35), swap is
// tolerated, and root lacks CAP_SYS_RESOURCE, so kubelet keeps its own
// oom_score_adj at 0 instead of lowering it. containerd 1.6 answers no CRI
// RuntimeConfig, so kubelet takes the cgroup driver from this file (1.37
// still falls back to it; kubelet says the fallback goes in 1.38). Image
// garbage collection is off, since the images were imported, not pulled, and
// could not come back; eviction waits for a nearly full disk. Pods get no
// resolv.conf from the host: nothing in them should resolve names outside
// the cluster.
func writeKubeletConfig(clientCAFile string, n *nodeState) (string, error) {
	cfg := kubeletConfig{
		Kind:                     "KubeletConfiguration",
		APIVersion:               "kubelet.config.k8s.io/v1beta1",
		Address:                  n.nodeIP().String(),
		Port:                     kubeletPort,
		ReadOnlyPort:             0,
		HealthzBindAddress:       "127.0.0.1",
		HealthzPort:              10248,
		TLSCertFile:              filepath.Join(n.NodeDir, kubeletServingCertFile),
		TLSPrivateKeyFile:        filepath.Join(n.NodeDir, kubeletServingKeyFile),
		Authorization:            kubeletAuthz{Mode: "Webhook"},
		ContainerRuntimeEndpoint: "unix://" + containerdSocket(n.containerdDir()),
		CgroupDriver:             "cgroupfs",
		CgroupRoot:               n.CgroupRoot,
		FailCgroupV1:             false,
		FailSwapOn:               false,
		OOMScoreAdj:              0,
		PodLogsDir:               filepath.Join(n.NodeDir, "pod-logs"),
		ResolvConf:               "",
		ClusterDomain:            clusterDomain,
		ClusterDNS:               []string{n.nodeIP().String()},
		EvictionHard: map[string]string{
			"memory.available":  "100Mi",
			"nodefs.available":  "1%",
			"nodefs.inodesFree": "1%",
			"imagefs.available": "1%",
		},
		ImageGCHighThresholdPercent: 100,
		ImageGCLowThresholdPercent:  99,
	}
	cfg.Authentication.X509.ClientCAFile = clientCAFile
	cfg.Authentication.Webhook.Enabled = true
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encoding the kubelet configuration: %w", err)
	}
	path := filepath.Join(n.NodeDir, "kubelet.json")
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("writing the kubelet configuration: %w", err)
	}
	return path, nil
}

// kubeletArgs are the kubelet's flags beyond its configuration file.
func kubeletArgs(config string, n *nodeState) []string {
	args := []string{
		"--config=" + config,
		"--kubeconfig=" + filepath.Join(n.NodeDir, kubeletKubeconfigFile),
		"--root-dir=" + n.kubeletDir(),
		"--node-ip=" + n.nodeIP().String(),
		"--hostname-override=" + n.Name,
	}
	if len(n.Labels) > 0 {
		var labels []string
		for _, k := range slices.Sorted(maps.Keys(n.Labels)) {
			labels = append(labels, k+"="+n.Labels[k])
		}
		args = append(args, "--node-labels="+strings.Join(labels, ","))
	}
	return args
}

// nodeReady returns nil once the node is registered and its kubelet, started
// at since, has reported it Ready. A Node restarted in the same folder keeps
// the status its last kubelet wrote, which says nothing about this one.
func nodeReady(ctx context.Context, client kubernetes.Interface, name string, since time.Time) error {
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("node %s: %w", name, err)
	}
	for _, c := range node.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		// Heartbeats have a resolution of a second.
		if c.LastHeartbeatTime.Time.Before(since.Truncate(time.Second)) {
			return fmt.Errorf("node %s: no status from the new kubelet yet", name)
		}
		if c.Status != corev1.ConditionTrue {
			return fmt.Errorf("node %s not ready: %s: %s", name, c.Reason, c.Message)
		}
		return nil
	}
	return fmt.Errorf("node %s has no Ready condition yet", name)
}

// kube-proxy's files, in the node's folder, and its user, which RBAC's
// default system:node-proxier binding names.
const (
	proxyKubeconfigFile = "kube-proxy.kubeconfig"
	proxyUser           = "system:kube-proxy"
	proxyHealthzPort    = 10256
)

// proxyConfig is the part of kubeproxy.config.k8s.io/v1alpha1
// KubeProxyConfiguration the node sets, spelled out like kubeletConfig.
type proxyConfig struct {
	Kind               string               `json:"kind"`
	APIVersion         string               `json:"apiVersion"`
	ClientConnection   proxyClient          `json:"clientConnection"`
	HostnameOverride   string               `json:"hostnameOverride"`
	BindAddress        string               `json:"bindAddress"`
	HealthzBindAddress string               `json:"healthzBindAddress"`
	MetricsBindAddress string               `json:"metricsBindAddress"`
	Mode               string               `json:"mode"`
	ClusterCIDR        string               `json:"clusterCIDR"`
	NodePortAddresses  []string             `json:"nodePortAddresses"`
	OOMScoreAdj        int32                `json:"oomScoreAdj"`
	Conntrack          proxyConntrackConfig `json:"conntrack"`
}

type proxyClient struct {
	Kubeconfig string `json:"kubeconfig"`
}

type proxyConntrackConfig struct {
	MaxPerCore            int32  `json:"maxPerCore"`
	Min                   int32  `json:"min"`
	TCPEstablishedTimeout string `json:"tcpEstablishedTimeout"`
	TCPCloseWaitTimeout   string `json:"tcpCloseWaitTimeout"`
}

// writeProxyConfig writes kube-proxy's configuration file and returns its
// path. kube-proxy programs iptables in the node's network namespace only.
// It leaves the connection-tracking settings alone, since they belong to the
// whole host, and its own oom_score_adj, which root may not lower here.
func writeProxyConfig(n *nodeState, kubeconfig string) (string, error) {
	cfg := proxyConfig{
		Kind:               "KubeProxyConfiguration",
		APIVersion:         "kubeproxy.config.k8s.io/v1alpha1",
		ClientConnection:   proxyClient{Kubeconfig: kubeconfig},
		HostnameOverride:   n.Name,
		BindAddress:        n.nodeIP().String(),
		HealthzBindAddress: n.nodeIP().String() + ":" + strconv.Itoa(proxyHealthzPort),
		MetricsBindAddress: "127.0.0.1:10249",
		Mode:               "iptables",
		ClusterCIDR:        n.PodCIDR.String(),
		NodePortAddresses:  []string{n.nodeIP().String() + "/32"},
		OOMScoreAdj:        0,
		Conntrack:          proxyConntrackConfig{TCPEstablishedTimeout: "0s", TCPCloseWaitTimeout: "0s"},
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encoding the kube-proxy configuration: %w", err)
	}
	path := filepath.Join(n.NodeDir, "kube-proxy.json")
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("writing the kube-proxy configuration: %w", err)
	}
	return path, nil
}

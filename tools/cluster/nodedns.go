package cluster

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/kos-sdn/kos/tools/images"
	"github.com/kos-sdn/kos/tools/testenv"
)

// The node's cluster DNS: tools/cluster/nodedns, which answers for the
// cluster's Services on the node's IP, port 53, in the node's network
// namespace; kubelet names the node's IP as its pods' name server.
const (
	nodeDNSName    = "nodedns"
	nodeDNSPackage = "github.com/kos-sdn/kos/tools/cluster/nodedns"
	nodeDNSPort    = 53
	clusterDomain  = "cluster.local"
)

// serviceCIDR is kube-apiserver's --service-cluster-ip-range. The node's
// network namespace routes it to its loopback interface, from the node's IP,
// so that hostNetwork pods reach Service IPs: kube-proxy's DNAT rewrites
// the destination before the packet goes anywhere.
var serviceCIDR = testenv.ServiceCIDR

// startNodeDNS builds tools/cluster/nodedns into the node's folder, starts
// it in the node's network namespace with the admin kubeconfig and waits
// until it answers for the kubernetes Service.
func (c *Cluster) startNodeDNS(ctx context.Context, n *nodeState) error {
	began := time.Now()
	files, err := images.BuildGo(ctx, images.GoOptions{OutDir: filepath.Join(n.NodeDir, "bin")}, nodeDNSPackage)
	if err != nil {
		return fmt.Errorf("building the node's DNS server: %w", err)
	}
	c.printf("built %s in %s; starting it on node %s", nodeDNSName, time.Since(began).Round(10*time.Millisecond), n.Name)
	addr := net.JoinHostPort(n.nodeIP().String(), strconv.Itoa(nodeDNSPort))
	p, err := n.startIn(nodeDNSName, files[0].Source,
		[]string{"-listen=" + addr, "-kubeconfig=" + c.Kubeconfig, "-domain=" + clusterDomain}, c.detached)
	if err != nil {
		return err
	}
	if err := c.track(p); err != nil {
		return err
	}
	return p.WaitReady(ctx, c.timeout, func(ctx context.Context) error {
		got, err := resolveAt(ctx, addr, "kubernetes.default.svc."+clusterDomain+".")
		if err != nil {
			return err
		}
		if !slices.Contains(got, serviceCIDR.Addr().Next().String()) {
			return fmt.Errorf("kubernetes.default.svc.%s is %v, want %s", clusterDomain, got, serviceCIDR.Addr().Next())
		}
		return nil
	})
}

// resolveAt looks name up with the name server at addr alone.
func resolveAt(ctx context.Context, addr, name string) ([]string, error) {
	r := &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	got, err := r.LookupHost(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("resolving %s at %s: %w", name, addr, err)
	}
	return got, nil
}

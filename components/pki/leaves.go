package pki

import (
	"crypto/x509"
	"fmt"
	"net"
	"strings"
)

// DefaultNamespace is the namespace of the KOS addons and so of the Secrets.
const DefaultNamespace = "example-com"

// The Secrets of the KOS PKI.
const (
	// CASecret holds the CA (keys CACertKey and CAKeyKey) that signs all
	// the others, which hold a leaf certificate each (keys tls.crt, tls.key
	// and CACertKey).
	CASecret = "kos-ca"
	// EtcdServerSecret is the KOS etcd's certificate for its clients.
	EtcdServerSecret = "kos-etcd-server"
	// EtcdPeerSecret is the certificate KOS etcd members present to each
	// other, as servers and as clients.
	EtcdPeerSecret = "kos-etcd-peer"
	// EtcdClientSecret is kos-apiserver's client certificate for its etcd.
	EtcdClientSecret = "kos-etcd-client"
	// APIServerServingSecret is kos-apiserver's serving certificate.
	APIServerServingSecret = "kos-apiserver-serving"
)

// Keys of the Secrets' data besides tls.crt and tls.key.
const (
	// CACertKey is the PEM-encoded CA certificate, in every Secret.
	CACertKey = "ca.crt"
	// CAKeyKey is the PEM-encoded CA private key, in CASecret only.
	CAKeyKey = "ca.key"
)

// The names in the certificates: the headless Service of the etcd
// StatefulSet and the Service of kos-apiserver.
const (
	etcdService      = "kos-etcd"
	apiServerService = "kos-apiserver"
	// clusterDomain is the cluster's DNS domain, which fully qualified
	// names of Services end with.
	clusterDomain = "cluster.local"
)

// Leaf says what a leaf certificate holds and which Secret keeps it.
type Leaf struct {
	// Secret names the Secret, in the namespace being ensured.
	Secret string
	// CommonName is the certificate's subject common name, which etcd
	// and Kubernetes read as the client's user name.
	CommonName string
	// Organization is the certificate's subject organizations, which
	// Kubernetes reads as the client's groups.
	Organization []string
	// DNSNames and IPAddresses are the certificate's subject alternative
	// names, for which it serves.
	DNSNames    []string
	IPAddresses []net.IP
	// Usages are the certificate's extended key usages.
	Usages []x509.ExtKeyUsage
}

// Set names the Secrets that one kind of pod needs ensured, as the
// --secrets flag of kos-pki says.
type Set string

// The sets.
const (
	// SetEtcd is what an etcd member needs: its server and peer
	// certificates.
	SetEtcd Set = "etcd"
	// SetAPIServer is what kos-apiserver needs: its serving certificate
	// and its client certificate for etcd.
	SetAPIServer Set = "apiserver"
	// SetAll is every Secret.
	SetAll Set = "all"
)

// Sets are the valid sets, in the order help texts list them.
var Sets = []Set{SetEtcd, SetAPIServer, SetAll}

// Leaves returns the leaf certificates of the set for the Services in
// namespace. The CA, which signs them, is in every set.
func (s Set) Leaves(namespace string) ([]Leaf, error) {
	switch s {
	case SetEtcd:
		return []Leaf{EtcdServer(namespace), EtcdPeer(namespace)}, nil
	case SetAPIServer:
		return []Leaf{EtcdClient(), APIServerServing(namespace)}, nil
	case SetAll:
		return []Leaf{EtcdServer(namespace), EtcdPeer(namespace), EtcdClient(), APIServerServing(namespace)}, nil
	}
	var valid []string
	for _, v := range Sets {
		valid = append(valid, string(v))
	}
	return nil, fmt.Errorf("unknown set of secrets %q, want one of %s", s, strings.Join(valid, ", "))
}

// EtcdServer is the etcd members' certificate for clients. It names the
// headless Service of the StatefulSet and, through wildcards, every member
// behind it; localhost and 127.0.0.1 serve probes and etcdctl in the pod.
// It may also authenticate as a client, as etcd's own gateway and tools do.
func EtcdServer(namespace string) Leaf {
	return Leaf{
		Secret:      EtcdServerSecret,
		CommonName:  etcdService,
		DNSNames:    etcdNames(namespace),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		Usages:      []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
}

// EtcdPeer is the certificate etcd members present to each other: each
// serves its peers and is their client, so it has both usages.
func EtcdPeer(namespace string) Leaf {
	l := EtcdServer(namespace)
	l.Secret = EtcdPeerSecret
	return l
}

// EtcdClient is kos-apiserver's client certificate for etcd.
func EtcdClient() Leaf {
	return Leaf{
		Secret:     EtcdClientSecret,
		CommonName: apiServerService,
		Usages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

// APIServerServing is kos-apiserver's serving certificate, for the names
// of its Service that the aggregator and direct clients dial.
func APIServerServing(namespace string) Leaf {
	svc := apiServerService
	return Leaf{
		Secret:     APIServerServingSecret,
		CommonName: svc,
		DNSNames: []string{
			svc,
			svc + "." + namespace,
			svc + "." + namespace + ".svc",
			svc + "." + namespace + ".svc." + clusterDomain,
			"localhost",
		},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		Usages:      []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
}

func etcdNames(namespace string) []string {
	svc := etcdService
	return []string{
		svc,
		svc + "." + namespace,
		svc + "." + namespace + ".svc",
		"*." + svc,
		"*." + svc + "." + namespace,
		"*." + svc + "." + namespace + ".svc",
		"*." + svc + "." + namespace + ".svc." + clusterDomain,
		"localhost",
	}
}

package podnetwork

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// NetworksAnnotation is the pod annotation that asks for secondary networks,
// in the convention of the Kubernetes Network Plumbing Working Group that
// Multus implements.
const NetworksAnnotation = "k8s.v1.cni.cncf.io/networks"

// maxInterfaceName is the longest a Linux interface name may be (IFNAMSIZ
// less the terminating NUL).
const maxInterfaceName = 15

// Network is one entry of a pod's networks annotation: a
// NetworkAttachmentDefinition and the interface the pod gets on it.
type Network struct {
	// Namespace and Name name the NetworkAttachmentDefinition; the
	// namespace defaults to the pod's.
	Namespace, Name string
	// Interface is the name of the interface in the pod: the one asked for,
	// else net<N> for the N-th entry of the annotation, as Multus names it.
	Interface string
	// IPs are the addresses asked for, as written (an address or a CIDR).
	IPs []string
	// MAC is the MAC address asked for ("mac"), as written. KOS gives an
	// interface its attachment's MAC address, so a kos entry refuses it.
	MAC string
}

// String returns the entry in the annotation's short form,
// <namespace>/<name>@<interface>.
func (n Network) String() string {
	return n.Namespace + "/" + n.Name + "@" + n.Interface
}

// ParseNetworks parses the value of a pod's networks annotation: a list of
// NetworkAttachmentDefinitions separated by commas, each as
// [<namespace>/]<name>[@<interface>], or a JSON list of objects with the
// keys name, namespace, interface, ips and mac (other keys are Multus's and
// ignored here). namespace is the pod's. It reports every problem at once,
// each naming the entry by its position; an empty value asks for nothing.
func ParseNetworks(value, namespace string) ([]Network, error) {
	value = strings.TrimSpace(value)
	if value == "" {
		return nil, nil
	}
	var nets []Network
	// errs holds each entry's problem, by position.
	var errs []error
	if strings.HasPrefix(value, "[") {
		var list []struct {
			Name      string   `json:"name"`
			Namespace string   `json:"namespace"`
			Interface string   `json:"interface"`
			IPs       []string `json:"ips"`
			MAC       string   `json:"mac"`
		}
		if err := json.Unmarshal([]byte(value), &list); err != nil {
			return nil, fmt.Errorf("parsing the JSON list: %w", err)
		}
		for _, e := range list {
			nets = append(nets, Network{Namespace: e.Namespace, Name: e.Name, Interface: e.Interface, IPs: e.IPs, MAC: e.MAC})
			errs = append(errs, nil)
		}
	} else if strings.HasPrefix(value, "{") {
		return nil, errors.New("a JSON value must be a list of objects, such as [{\"name\":\"blue\"}]")
	} else {
		for i, item := range strings.Split(value, ",") {
			n, err := parseShortForm(strings.TrimSpace(item))
			if err != nil {
				err = fmt.Errorf("network %d (%q): %w", i+1, item, err)
			}
			nets = append(nets, n)
			errs = append(errs, err)
		}
	}
	interfaces := map[string]int{}
	for i := range nets {
		n := &nets[i]
		if errs[i] != nil {
			continue
		}
		if n.Namespace == "" {
			n.Namespace = namespace
		}
		if n.Interface == "" {
			n.Interface = fmt.Sprintf("net%d", i+1)
		}
		if err := checkNetwork(*n); err != nil {
			errs[i] = fmt.Errorf("network %d (%s): %w", i+1, n, err)
			continue
		}
		if first, dup := interfaces[n.Interface]; dup {
			errs[i] = fmt.Errorf("network %d (%s): interface %s is already network %d's", i+1, n, n.Interface, first)
			continue
		}
		interfaces[n.Interface] = i + 1
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return nets, nil
}

// parseShortForm parses [<namespace>/]<name>[@<interface>].
func parseShortForm(item string) (Network, error) {
	var n Network
	if item == "" {
		return n, errors.New("empty entry")
	}
	rest := item
	if ns, name, ok := strings.Cut(rest, "/"); ok {
		n.Namespace, rest = ns, name
		if n.Namespace == "" {
			return n, errors.New("empty namespace before /")
		}
	}
	if name, ifname, ok := strings.Cut(rest, "@"); ok {
		rest, n.Interface = name, ifname
		if n.Interface == "" {
			return n, errors.New("empty interface name after @")
		}
	}
	n.Name = rest
	return n, nil
}

// checkNetwork checks the names of an entry whose defaults are filled in.
func checkNetwork(n Network) error {
	var errs []error
	if n.Name == "" {
		errs = append(errs, errors.New("no NetworkAttachmentDefinition name"))
	} else if msgs := validation.IsDNS1123Subdomain(n.Name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("NetworkAttachmentDefinition name %q: %s", n.Name, strings.Join(msgs, "; ")))
	}
	if msgs := validation.IsDNS1123Label(n.Namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("namespace %q: %s", n.Namespace, strings.Join(msgs, "; ")))
	}
	if err := CheckInterfaceName(n.Interface); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// CheckInterfaceName returns an error unless name can name a Linux network
// interface: 1 to 15 bytes, neither "." nor "..", and no '/', ':' or
// white space.
func CheckInterfaceName(name string) error {
	switch {
	case name == "":
		return errors.New("empty interface name")
	case len(name) > maxInterfaceName:
		return fmt.Errorf("interface name %q is longer than %d bytes", name, maxInterfaceName)
	case name == "." || name == "..":
		return fmt.Errorf("interface name %q is not allowed", name)
	case strings.ContainsAny(name, "/: \t\n\v\f\r\x00"):
		return fmt.Errorf("interface name %q holds '/', ':', a NUL or white space", name)
	}
	return nil
}

// RequestedIPv4 returns the one IPv4 address that ips (a Network's IPs) asks
// for, or the zero Addr when it asks for none. Each element is an address or
// an address with a prefix length (10.1.0.5/24), as Multus passes them on.
func RequestedIPv4(ips []string) (netip.Addr, error) {
	switch len(ips) {
	case 0:
		return netip.Addr{}, nil
	case 1:
	default:
		return netip.Addr{}, fmt.Errorf("asks for %d addresses (%s); a KOS interface has one", len(ips), strings.Join(ips, ", "))
	}
	s := ips[0]
	addr, err := netip.ParseAddr(s)
	if err != nil {
		p, perr := netip.ParsePrefix(s)
		if perr != nil {
			return netip.Addr{}, fmt.Errorf("requested address %q is neither an address nor an address with a prefix length", s)
		}
		addr = p.Addr()
	}
	if !addr.Is4() {
		return netip.Addr{}, fmt.Errorf("requested address %q is not IPv4; KOS subnets are IPv4", s)
	}
	return addr, nil
}

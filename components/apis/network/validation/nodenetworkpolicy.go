package validation

import (
	"net/netip"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kos-sdn/kos/components/apis/network"
)

// ValidateNodeNetworkPolicy checks a NodeNetworkPolicy being created or
// updated: a node, a VNI, IPv4 addresses and prefixes, known protocols and
// ports in 0-65535 with ranges that do not end before they start.
func ValidateNodeNetworkPolicy(p *network.NodeNetworkPolicy) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMeta(&p.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	errs = append(errs, validateObjectName(p.Spec.Node, "Node", specPath.Child("node"))...)
	errs = append(errs, ValidateVNI(p.Spec.VNI, specPath.Child("vni"))...)
	for i, pol := range p.Spec.Policies {
		path := specPath.Child("policies").Index(i)
		if pol.Name == "" {
			errs = append(errs, field.Required(path.Child("name"), "the policy's namespace/name"))
		}
		for j, a := range pol.Selected {
			if ip, err := netip.ParseAddr(a); err != nil || !ip.Is4() {
				errs = append(errs, field.Invalid(path.Child("selected").Index(j), a, "must be an IPv4 address"))
			}
		}
		errs = append(errs, validatePolicyRules(pol.IngressRules, path.Child("ingressRules"))...)
		errs = append(errs, validatePolicyRules(pol.EgressRules, path.Child("egressRules"))...)
	}
	return errs
}

// ValidateNodeNetworkPolicyUpdate checks an update: node and VNI are
// immutable.
func ValidateNodeNetworkPolicyUpdate(p, old *network.NodeNetworkPolicy) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaUpdate(&p.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	errs = append(errs, ValidateNodeNetworkPolicy(p)...)
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(p.Spec.Node, old.Spec.Node, specPath.Child("node"))...)
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(p.Spec.VNI, old.Spec.VNI, specPath.Child("vni"))...)
	return errs
}

func validatePolicyRules(rules []network.PolicyRule, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, r := range rules {
		for j, peer := range r.Peers {
			pp := path.Index(i).Child("peers").Index(j)
			prefix, err := netip.ParsePrefix(peer.CIDR)
			if err != nil || !prefix.Addr().Is4() {
				errs = append(errs, field.Invalid(pp.Child("cidr"), peer.CIDR, "must be an IPv4 prefix"))
				continue
			}
			for k, e := range peer.Except {
				ep, err := netip.ParsePrefix(e)
				if err != nil || !ep.Addr().Is4() || ep.Bits() < prefix.Bits() || !prefix.Contains(ep.Addr()) {
					errs = append(errs, field.Invalid(pp.Child("except").Index(k), e, "must be an IPv4 prefix within cidr"))
				}
			}
		}
		for j, port := range r.Ports {
			pp := path.Index(i).Child("ports").Index(j)
			switch port.Protocol {
			case "TCP", "UDP", "SCTP":
			default:
				errs = append(errs, field.NotSupported(pp.Child("protocol"), port.Protocol, []string{"TCP", "UDP", "SCTP"}))
			}
			if port.Port < 0 || port.Port > 65535 {
				errs = append(errs, field.Invalid(pp.Child("port"), port.Port, "must be in [0,65535]"))
			}
			if port.EndPort != 0 && (port.Port == 0 || port.EndPort < port.Port || port.EndPort > 65535) {
				errs = append(errs, field.Invalid(pp.Child("endPort"), port.EndPort, "must be 0, or in [port,65535] with a port"))
			}
		}
	}
	return errs
}

// Package validation checks KOS API objects. Its functions are pure: they look
// only at the objects they are given and return every problem at once.
package validation

import (
	"fmt"
	"net"
	"net/netip"
	"path"
	"strings"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kos-sdn/kos/components/apis/network"
)

// privateRanges are the address blocks of RFC 1918.
var privateRanges = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
}

const insideOneRange = "must lie inside one RFC 1918 range (10.0.0.0/8, 172.16.0.0/12 or 192.168.0.0/16)"

var (
	specPath   = field.NewPath("spec")
	statusPath = field.NewPath("status")
)

// ValidateSubnet checks a Subnet being created.
func ValidateSubnet(subnet *network.Subnet) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMeta(&subnet.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	errs = append(errs, ValidateVNI(subnet.Spec.VNI, specPath.Child("vni"))...)
	errs = append(errs, ValidateCIDR(subnet.Spec.IPv4, specPath.Child("ipv4"))...)
	return errs
}

// ValidateSubnetUpdate checks an update of a Subnet's metadata or spec; the spec
// is immutable.
func ValidateSubnetUpdate(subnet, old *network.Subnet) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaUpdate(&subnet.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(subnet.Spec.IPv4, old.Spec.IPv4, specPath.Child("ipv4"))...)
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(subnet.Spec.VNI, old.Spec.VNI, specPath.Child("vni"))...)
	return errs
}

// ValidateSubnetStatusUpdate checks an update of a Subnet's status: once
// validated, a subnet stays validated.
func ValidateSubnetStatusUpdate(subnet, old *network.Subnet) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaUpdate(&subnet.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	if old.Status.Validated && !subnet.Status.Validated {
		errs = append(errs, field.Invalid(statusPath.Child("validated"), false, "may not change from true to false"))
	}
	return errs
}

// ValidateSubnetConflicts checks subnet against rivals, other subnets, by the
// rule of SubnetConflict.
func ValidateSubnetConflicts(subnet *network.Subnet, rivals []*network.Subnet) field.ErrorList {
	var errs field.ErrorList
	self := SubnetPlacement{Namespace: subnet.Namespace, Name: subnet.Name, VNI: subnet.Spec.VNI, IPv4: subnet.Spec.IPv4}
	for _, rival := range rivals {
		if err := SubnetConflict(self, SubnetPlacement{Namespace: rival.Namespace, Name: rival.Name, VNI: rival.Spec.VNI, IPv4: rival.Spec.IPv4}); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// SubnetPlacement is what the subnet conflict rule reads of a subnet, in
// either version of the API.
type SubnetPlacement struct {
	Namespace, Name string
	VNI             uint32
	IPv4            string
}

// SubnetConflict is the subnet conflict rule, which the API server's
// create-time check and the subnet validator controller both apply: a VNI's
// subnets must live in one namespace and have disjoint CIDR blocks. It
// returns the problem when rival conflicts with subnet, and nil when it does
// not; a rival of another VNI, the subnet itself and a rival with a malformed
// block (which can overlap nothing) never conflict. The error's detail is
// the text status.errors uses.
func SubnetConflict(subnet, rival SubnetPlacement) *field.Error {
	if rival.VNI != subnet.VNI || (rival.Namespace == subnet.Namespace && rival.Name == subnet.Name) {
		return nil
	}
	if rival.Namespace != subnet.Namespace {
		return field.Invalid(specPath.Child("vni"), subnet.VNI,
			fmt.Sprintf("same VNI but different namespace wrt %s/%s", rival.Namespace, rival.Name))
	}
	prefix, err := netip.ParsePrefix(subnet.IPv4)
	if err != nil {
		return nil
	}
	rivalPrefix, err := netip.ParsePrefix(rival.IPv4)
	if err != nil || !prefix.Overlaps(rivalPrefix) {
		return nil
	}
	return field.Invalid(specPath.Child("ipv4"), subnet.IPv4,
		fmt.Sprintf("CIDR overlaps with %s/%s's (%s)", rival.Namespace, rival.Name, rival.IPv4))
}

// ValidateVNI checks that vni is a VNI a Subnet may use.
func ValidateVNI(vni uint32, fldPath *field.Path) field.ErrorList {
	if vni < network.MinVNI || vni > network.MaxVNI {
		return field.ErrorList{field.Invalid(fldPath, vni, fmt.Sprintf("must be in [%d,%d]", network.MinVNI, network.MaxVNI))}
	}
	return nil
}

// ValidateCIDR checks that cidr is an IPv4 CIDR block, without host bits, that
// lies inside one of the private ranges of RFC 1918.
func ValidateCIDR(cidr string, fldPath *field.Path) field.ErrorList {
	if cidr == "" {
		return field.ErrorList{field.Required(fldPath, "an IPv4 CIDR block such as 10.1.0.0/16")}
	}
	prefix, err := netip.ParsePrefix(cidr)
	if err != nil {
		return field.ErrorList{field.Invalid(fldPath, cidr, "must be an IPv4 CIDR block such as 10.1.0.0/16")}
	}
	if !prefix.Addr().Is4() {
		return field.ErrorList{field.Invalid(fldPath, cidr, "must be an IPv4 CIDR block, not IPv6")}
	}
	if masked := prefix.Masked(); masked != prefix {
		return field.ErrorList{field.Invalid(fldPath, cidr, fmt.Sprintf("must have no host bits set (the block is %s)", masked))}
	}
	var overlapped []string
	for _, r := range privateRanges {
		if r.Bits() <= prefix.Bits() && r.Contains(prefix.Addr()) {
			return nil
		}
		if r.Overlaps(prefix) {
			overlapped = append(overlapped, r.String())
		}
	}
	if len(overlapped) > 1 {
		return field.ErrorList{field.Invalid(fldPath, cidr, fmt.Sprintf("spans %s; %s", strings.Join(overlapped, " and "), insideOneRange))}
	}
	return field.ErrorList{field.Invalid(fldPath, cidr, insideOneRange)}
}

// ValidateNetworkAttachment checks a NetworkAttachment being created.
func ValidateNetworkAttachment(att *network.NetworkAttachment) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMeta(&att.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	errs = append(errs, validateObjectName(att.Spec.Node, "node", specPath.Child("node"))...)
	errs = append(errs, validateObjectName(att.Spec.Subnet, "Subnet", specPath.Child("subnet"))...)
	if att.Spec.IPv4 != "" {
		errs = append(errs, ValidateIPv4(att.Spec.IPv4, specPath.Child("ipv4"))...)
	}
	errs = append(errs, ValidateExec(att.Spec.PostCreateExec, specPath.Child("postCreateExec"))...)
	errs = append(errs, ValidateExec(att.Spec.PostDeleteExec, specPath.Child("postDeleteExec"))...)
	return errs
}

// ValidateIPv4 checks that addr is an IPv4 address in dotted-decimal form,
// such as 10.1.0.7: no prefix length, no leading zeros, not IPv6. The form
// is the one IPAM writes into status.ipv4, so the two compare as strings.
func ValidateIPv4(addr string, fldPath *field.Path) field.ErrorList {
	a, err := netip.ParseAddr(addr)
	if err != nil || !a.Is4() || a.String() != addr {
		return field.ErrorList{field.Invalid(fldPath, addr, "must be an IPv4 address such as 10.1.0.7")}
	}
	return nil
}

// Bounds of spec.postCreateExec and spec.postDeleteExec: a command is a
// program and its arguments, and the agent reports it back in status, so it
// stays small.
const (
	// MaxExecArgs is the most elements a command may have, the program
	// included.
	MaxExecArgs = 32
	// MaxExecArgLength is the longest an element of a command may be, in
	// bytes.
	MaxExecArgLength = 1024
)

// ValidateExec checks a postCreateExec or postDeleteExec command: empty (no
// command), or an absolute, clean program path followed by at most
// MaxExecArgs-1 arguments, none longer than MaxExecArgLength bytes or holding
// a NUL byte. Whether the program may run is the node agent's allow-list's
// call, not the API's.
func ValidateExec(command []string, fldPath *field.Path) field.ErrorList {
	if len(command) == 0 {
		return nil
	}
	var errs field.ErrorList
	if len(command) > MaxExecArgs {
		errs = append(errs, field.TooMany(fldPath, len(command), MaxExecArgs))
	}
	for i, arg := range command[:min(len(command), MaxExecArgs)] {
		p := fldPath.Index(i)
		switch {
		case len(arg) > MaxExecArgLength:
			errs = append(errs, field.TooLong(p, "", MaxExecArgLength))
		case strings.ContainsRune(arg, 0):
			errs = append(errs, field.Invalid(p, arg, "must not contain a NUL byte"))
		case i == 0 && (!path.IsAbs(arg) || path.Clean(arg) != arg):
			errs = append(errs, field.Invalid(p, arg, "must be the absolute, clean path of a program, such as /usr/sbin/ip"))
		}
	}
	return errs
}

// ValidateNetworkAttachmentUpdate checks an update of a NetworkAttachment's
// metadata or spec; spec.node, spec.subnet and spec.ipv4 are immutable.
func ValidateNetworkAttachmentUpdate(att, old *network.NetworkAttachment) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaUpdate(&att.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(att.Spec.Node, old.Spec.Node, specPath.Child("node"))...)
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(att.Spec.Subnet, old.Spec.Subnet, specPath.Child("subnet"))...)
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(att.Spec.IPv4, old.Spec.IPv4, specPath.Child("ipv4"))...)
	errs = append(errs, ValidateExec(att.Spec.PostCreateExec, specPath.Child("postCreateExec"))...)
	errs = append(errs, ValidateExec(att.Spec.PostDeleteExec, specPath.Child("postDeleteExec"))...)
	return errs
}

// The MTUs an attachment's status may report: IPv4's smallest (RFC 791) and
// its largest packet.
const (
	minMTU = 68
	maxMTU = 65535
)

// ValidateNetworkAttachmentStatusUpdate checks an update of a NetworkAttachment's
// status: the addresses in it, when set, must parse, and an MTU, when set,
// must be one IPv4 allows. The address of a live attachment never changes:
// status.ipv4 and status.addressVNI, once set, may be cleared but not set to
// another address (IPAM clears an address it can no longer hold, and a node
// agent sees the interface go before another address comes), and status.ipv4
// is spec.ipv4 when the spec asks for an address. att.Spec must be the
// stored spec, which the status endpoint keeps.
func ValidateNetworkAttachmentStatusUpdate(att, old *network.NetworkAttachment) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaUpdate(&att.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	st := att.Status
	if st.IPv4 != "" {
		if a, err := netip.ParseAddr(st.IPv4); err != nil || !a.Is4() {
			errs = append(errs, field.Invalid(statusPath.Child("ipv4"), st.IPv4, "must be an IPv4 address"))
		}
	}
	if was := old.Status; was.IPv4 != "" && st.IPv4 != "" {
		if st.IPv4 != was.IPv4 {
			errs = append(errs, field.Invalid(statusPath.Child("ipv4"), st.IPv4, fmt.Sprintf("may not change from %s to another address; clear it first", was.IPv4)))
		} else if st.AddressVNI != was.AddressVNI {
			errs = append(errs, field.Invalid(statusPath.Child("addressVNI"), st.AddressVNI, fmt.Sprintf("may not change from %d while status.ipv4 is set; clear the address first", was.AddressVNI)))
		}
	}
	if st.IPv4 != "" && att.Spec.IPv4 != "" && st.IPv4 != att.Spec.IPv4 {
		errs = append(errs, field.Invalid(statusPath.Child("ipv4"), st.IPv4, fmt.Sprintf("must be spec.ipv4 (%s), the address asked for", att.Spec.IPv4)))
	}
	if st.HostIP != "" {
		if _, err := netip.ParseAddr(st.HostIP); err != nil {
			errs = append(errs, field.Invalid(statusPath.Child("hostIP"), st.HostIP, "must be an IP address"))
		}
	}
	if st.MACAddress != "" {
		if _, err := net.ParseMAC(st.MACAddress); err != nil {
			errs = append(errs, field.Invalid(statusPath.Child("macAddress"), st.MACAddress, "must be a MAC address"))
		}
	}
	if st.MTU != 0 && (st.MTU < minMTU || st.MTU > maxMTU) {
		errs = append(errs, field.Invalid(statusPath.Child("mtu"), st.MTU, fmt.Sprintf("must be between %d and %d", minMTU, maxMTU)))
	}
	return errs
}

// ValidateIPLock checks an IPLock being created.
func ValidateIPLock(lock *network.IPLock) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMeta(&lock.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	errs = append(errs, validateObjectName(lock.Spec.SubnetName, "Subnet", specPath.Child("subnetName"))...)
	return errs
}

// ValidateIPLockUpdate checks an update of an IPLock; its spec is immutable.
func ValidateIPLockUpdate(lock, old *network.IPLock) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaUpdate(&lock.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	errs = append(errs, apimachineryvalidation.ValidateImmutableField(lock.Spec.SubnetName, old.Spec.SubnetName, specPath.Child("subnetName"))...)
	return errs
}

// validateObjectName checks a reference to an object of kind by name.
func validateObjectName(name, kind string, fldPath *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(fldPath, "the name of a "+kind)}
	}
	var errs field.ErrorList
	for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(name, false) {
		errs = append(errs, field.Invalid(fldPath, name, msg))
	}
	return errs
}

package validation

import (
	"fmt"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kos-sdn/kos/components/apis/network"
)

// The tunnel ports a NetworkConfig may name.
const (
	minTunnelPort = 1
	maxTunnelPort = 65535
)

// ValidateNetworkConfig checks a NetworkConfig being created: the one
// allowed name, and the values spec sets.
func ValidateNetworkConfig(cfg *network.NetworkConfig) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMeta(&cfg.ObjectMeta, false, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	if cfg.Name != network.NetworkConfigName {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), cfg.Name,
			fmt.Sprintf("must be %q: a cluster has one NetworkConfig", network.NetworkConfigName)))
	}
	return append(errs, validateNetworkConfigSpec(&cfg.Spec)...)
}

// validateNetworkConfigSpec checks the values spec sets.
func validateNetworkConfigSpec(spec *network.NetworkConfigSpec) field.ErrorList {
	var errs field.ErrorList
	if spec.OverlayMTU != nil {
		errs = append(errs, ValidateOverlayMTU(*spec.OverlayMTU, specPath.Child("overlayMTU"))...)
	}
	if spec.TunnelPort != nil {
		errs = append(errs, ValidateTunnelPort(*spec.TunnelPort, specPath.Child("tunnelPort"))...)
	}
	return errs
}

// ValidateOverlayMTU checks that mtu is an MTU attachments' interfaces may
// have, in [network.MinOverlayMTU, network.MaxOverlayMTU].
func ValidateOverlayMTU(mtu int32, fldPath *field.Path) field.ErrorList {
	if mtu < network.MinOverlayMTU || mtu > network.MaxOverlayMTU {
		return field.ErrorList{field.Invalid(fldPath, mtu, fmt.Sprintf("must be in [%d,%d]", network.MinOverlayMTU, network.MaxOverlayMTU))}
	}
	return nil
}

// ValidateTunnelPort checks that port is a UDP port.
func ValidateTunnelPort(port int32, fldPath *field.Path) field.ErrorList {
	if port < minTunnelPort || port > maxTunnelPort {
		return field.ErrorList{field.Invalid(fldPath, port, fmt.Sprintf("must be in [%d,%d]", minTunnelPort, maxTunnelPort))}
	}
	return nil
}

// ValidateNetworkConfigUpdate checks an update of a NetworkConfig's metadata
// or spec, given how many NetworkAttachments exist.
//
// The guard against unsafe changes: once status says a value was applied,
// a change of spec.overlayMTU or spec.tunnelPort to anything else is
// refused while attachments exist, unless cfg carries
// network.ForceUnsafeChangeAnnotation set to "true". Existing interfaces
// keep their MTU until their pods are re-created, so one network's pods
// would disagree on it; and nodes that have not yet moved to a new tunnel
// port cannot reach those that have. A value may not be unset once set:
// kos-controller-manager would fill it in again, recomputed.
func ValidateNetworkConfigUpdate(cfg, old *network.NetworkConfig, attachments int) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaUpdate(&cfg.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	errs = append(errs, validateNetworkConfigSpec(&cfg.Spec)...)
	if old.Spec.OverlayMTU != nil && cfg.Spec.OverlayMTU == nil {
		errs = append(errs, field.Required(specPath.Child("overlayMTU"), fmt.Sprintf("may not be unset once set (it was %d)", *old.Spec.OverlayMTU)))
	}
	if old.Spec.TunnelPort != nil && cfg.Spec.TunnelPort == nil {
		errs = append(errs, field.Required(specPath.Child("tunnelPort"), fmt.Sprintf("may not be unset once set (it was %d)", *old.Spec.TunnelPort)))
	}
	if attachments == 0 || cfg.Annotations[network.ForceUnsafeChangeAnnotation] == "true" {
		return errs
	}
	if err := unsafeChange(specPath.Child("overlayMTU"), cfg.Spec.OverlayMTU, old.Spec.OverlayMTU, old.Status.OverlayMTU, attachments,
		"interfaces that exist keep the old MTU until their pods are re-created, and packets larger than the smaller MTU between them are lost"); err != nil {
		errs = append(errs, err)
	}
	if err := unsafeChange(specPath.Child("tunnelPort"), cfg.Spec.TunnelPort, old.Spec.TunnelPort, old.Status.TunnelPort, attachments,
		"nodes lose each other's tunnel traffic until every agent uses the new port"); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// unsafeChange returns the refusal of a change of the value at fldPath from
// was to now when applied (0 for never) is set and differs from now, or
// nil.
func unsafeChange(fldPath *field.Path, now, was *int32, applied int32, attachments int, breaks string) *field.Error {
	if now == nil || applied == 0 || *now == applied || (was != nil && *was == *now) {
		return nil
	}
	noun := "NetworkAttachments exist"
	if attachments == 1 {
		noun = "NetworkAttachment exists"
	}
	return field.Forbidden(fldPath, fmt.Sprintf(
		"may not change from %d, the value applied, to %d while %d %s: %s; to change it anyway, set the annotation %s: \"true\" in the same update (docs/install.md, \"Network configuration\")",
		applied, *now, attachments, noun, breaks, network.ForceUnsafeChangeAnnotation))
}

// ValidateNetworkConfigStatusUpdate checks an update of a NetworkConfig's
// status: the values applied must be ones spec may hold.
func ValidateNetworkConfigStatusUpdate(cfg, old *network.NetworkConfig) field.ErrorList {
	errs := apimachineryvalidation.ValidateObjectMetaUpdate(&cfg.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	st := cfg.Status
	if st.OverlayMTU != 0 {
		errs = append(errs, ValidateOverlayMTU(st.OverlayMTU, statusPath.Child("overlayMTU"))...)
	}
	if st.TunnelPort != 0 {
		errs = append(errs, ValidateTunnelPort(st.TunnelPort, statusPath.Child("tunnelPort"))...)
	}
	if n := len(st.Underlay.TooSmall); n > network.MaxTooSmallNamed {
		errs = append(errs, field.TooMany(statusPath.Child("underlay", "tooSmall"), n, network.MaxTooSmallNamed))
	}
	return errs
}

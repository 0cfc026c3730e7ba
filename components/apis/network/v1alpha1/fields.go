package v1alpha1

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
)

// Field selector labels the server supports, besides metadata.name and
// metadata.namespace.
const (
	// FieldNode selects NetworkAttachments and NodeNetworkPolicies by
	// spec.node.
	FieldNode = "spec.node"
	// FieldSubnet selects NetworkAttachments by spec.subnet.
	FieldSubnet = "spec.subnet"
	// FieldIPv4 selects NetworkAttachments by status.ipv4.
	FieldIPv4 = "status.ipv4"
	// FieldHostIP selects NetworkAttachments by status.hostIP.
	FieldHostIP = "status.hostIP"
	// FieldAddressVNI selects NetworkAttachments by status.addressVNI, compared
	// as a number (so 007 selects VNI 7).
	FieldAddressVNI = "status.addressVNI"
	// FieldVNI selects Subnets and NodeNetworkPolicies by spec.vni,
	// compared as a number.
	FieldVNI = "spec.vni"
	// FieldSubnetName selects IPLocks by spec.subnetName.
	FieldSubnetName = "spec.subnetName"
)

// fieldKind says how the value of one field selector label is compared.
type fieldKind int

const (
	stringField fieldKind = iota
	uint32Field
)

// selectableFields lists, per kind, the labels a field selector may use.
var selectableFields = map[string]map[string]fieldKind{
	"Subnet": {
		FieldVNI: uint32Field,
	},
	"NetworkAttachment": {
		FieldNode:       stringField,
		FieldSubnet:     stringField,
		FieldIPv4:       stringField,
		FieldHostIP:     stringField,
		FieldAddressVNI: uint32Field,
	},
	"IPLock": {
		FieldSubnetName: stringField,
	},
	"NodeNetworkPolicy": {
		FieldNode: stringField,
		FieldVNI:  uint32Field,
	},
}

func addFieldLabelConversionFuncs(scheme *runtime.Scheme) error {
	for kind, fields := range selectableFields {
		err := scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind(kind), fieldLabelConversion(kind, fields))
		if err != nil {
			return fmt.Errorf("registering field selectors of %s: %w", kind, err)
		}
	}
	return nil
}

// fieldLabelConversion returns the function that checks a field selector's label
// for kind and puts its value in canonical form: numbers in plain decimal.
func fieldLabelConversion(kind string, fields map[string]fieldKind) runtime.FieldLabelConversionFunc {
	supported := append([]string{"metadata.name", "metadata.namespace"}, slices.Sorted(maps.Keys(fields))...)
	return func(label, value string) (string, string, error) {
		if label == "metadata.name" || label == "metadata.namespace" {
			return label, value, nil
		}
		fk, ok := fields[label]
		if !ok {
			return "", "", fmt.Errorf("field label %q not supported for %s; supported labels: %s", label, kind, strings.Join(supported, ", "))
		}
		if fk == uint32Field {
			n, err := strconv.ParseUint(value, 10, 32)
			if err != nil {
				return "", "", fmt.Errorf("field label %q of %s takes a decimal number in [0,4294967295], not %q", label, kind, value)
			}
			value = strconv.FormatUint(n, 10)
		}
		return label, value, nil
	}
}

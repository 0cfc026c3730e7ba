package podnetwork

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kos-sdn/kos/components/cni"
)

// PluginType is the CNI plugin type of a NetworkAttachmentDefinition whose
// interfaces KOS provides.
const PluginType = "kos"

// NetworkAttachmentDefinitions is the resource of the
// NetworkAttachmentDefinition CRD of the Network Plumbing Working Group,
// which Multus installs.
var NetworkAttachmentDefinitions = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

// PluginConfig is what KOS reads of a NetworkAttachmentDefinition's CNI
// configuration (spec.config).
type PluginConfig struct {
	// CNIVersion is the configuration's cniVersion.
	CNIVersion string
	// Type is the type of the plugin that makes the interface: of the
	// configuration, or of the first plugin of a configuration list.
	Type string
	// Subnet names the KOS Subnet, in the NetworkAttachmentDefinition's
	// namespace, when Type is kos.
	Subnet string
}

// IsKOS reports whether KOS provides the definition's interfaces.
func (c PluginConfig) IsKOS() bool { return c.Type == PluginType }

// ParsePluginConfig parses a NetworkAttachmentDefinition's spec.config: a
// CNI network configuration, or a configuration list whose first plugin
// makes the interface. An empty config (Multus then reads a file on the
// node) parses as a configuration of no type. A configuration of type kos
// must have a cniVersion kos-cni speaks (cni.Versions) and name a valid
// subnet; one of another type is not checked further.
func ParsePluginConfig(config string) (PluginConfig, error) {
	if strings.TrimSpace(config) == "" {
		return PluginConfig{}, nil
	}
	type plugin struct {
		CNIVersion string `json:"cniVersion"`
		Type       string `json:"type"`
		Subnet     string `json:"subnet"`
	}
	var conf struct {
		plugin
		Plugins []plugin `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(config), &conf); err != nil {
		return PluginConfig{}, fmt.Errorf("parsing the CNI configuration: %w", err)
	}
	p := conf.plugin
	if conf.Plugins != nil {
		if len(conf.Plugins) == 0 {
			return PluginConfig{}, errors.New("the CNI configuration list has no plugins")
		}
		first := conf.Plugins[0]
		for i, q := range conf.Plugins[1:] {
			if q.Type == PluginType {
				return PluginConfig{}, fmt.Errorf("plugin %d of the CNI configuration list is of type %s; it must be the first, which makes the interface", i+2, PluginType)
			}
		}
		p = plugin{CNIVersion: conf.CNIVersion, Type: first.Type, Subnet: first.Subnet}
	}
	c := PluginConfig{CNIVersion: p.CNIVersion, Type: p.Type, Subnet: p.Subnet}
	if !c.IsKOS() {
		return c, nil
	}
	if !slices.Contains(cni.Versions, c.CNIVersion) {
		// kos-cni would refuse every ADD; an attachment and its address
		// would only hide that.
		return c, fmt.Errorf("the kos configuration's cniVersion %q is not one kos-cni speaks (%s)", c.CNIVersion, strings.Join(cni.Versions, ", "))
	}
	if c.Subnet == "" {
		return c, errors.New(`the kos configuration has no "subnet": it must name a KOS Subnet in the NetworkAttachmentDefinition's namespace`)
	}
	if msgs := validation.IsDNS1123Subdomain(c.Subnet); len(msgs) > 0 {
		return c, fmt.Errorf("the kos configuration's subnet %q is not a valid Subnet name: %s", c.Subnet, strings.Join(msgs, "; "))
	}
	return c, nil
}

// DefinitionConfig returns the spec.config of a NetworkAttachmentDefinition
// read as unstructured data.
func DefinitionConfig(nad *unstructured.Unstructured) (string, error) {
	config, _, err := unstructured.NestedString(nad.Object, "spec", "config")
	if err != nil {
		return "", fmt.Errorf("reading spec.config: %w", err)
	}
	return config, nil
}

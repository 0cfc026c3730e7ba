package release

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kos-sdn/kos/channels"
	"github.com/kos-sdn/kos/components/fabric"
)

// Setting is one operator setting, ADDON.KEY=VALUE, such as
// kos-etcd.storage=10Gi. It applies to every release of the addon the tree
// carries.
type Setting struct {
	Addon, Key, Value string
}

func (s Setting) String() string { return s.Addon + "." + s.Key + "=" + s.Value }

// setting is what one ADDON.KEY changes.
type setting struct {
	// help says what it sets, for --help and errors.
	help string
	// check validates a value.
	check func(string) error
	// apply changes one object of the manifest; it reports whether it did.
	apply func(kind string, obj *yaml.Node, value string) (bool, error)
}

// agentMTU is the setting of the MTU of kos-agent's interfaces; both
// variants of the agent take it.
var agentMTU = setting{
	help:  fmt.Sprintf("MTU of the interfaces kos-agent makes for attachments (its --mtu): 0, the default, takes each node's underlay MTU less the %d bytes of VXLAN; else in [%d,%d]. Releases from 0.3.0 take it", fabric.VXLANOverhead, fabric.MinMTU, fabric.MaxMTU),
	check: checkMTU,
	apply: func(kind string, obj *yaml.Node, value string) (bool, error) {
		return setContainerFlag(kind, obj, "kos-agent", "--mtu", value)
	},
}

// settings are the known settings, by ADDON.KEY.
var settings = map[string]setting{
	"kos-agent.mtu":           agentMTU,
	"kos-agent-userspace.mtu": agentMTU,
	"kos-apiserver.replicas": {
		help:  "replicas of the kos-apiserver Deployment (default 2)",
		check: checkReplicas,
		apply: setReplicas,
	},
	"kos-controller-manager.replicas": {
		help:  "replicas of the kos-controller-manager Deployment (default 2; one works, the others wait for the Lease)",
		check: checkReplicas,
		apply: setReplicas,
	},
	"kos-etcd.storage": {
		help:  "size of each etcd member's volume (default 2Gi, at least 1Gi); choose it before the first install: a StatefulSet's volumes cannot change. Releases from 0.3.0 set etcd's space quota from it (docs/backup.md)",
		check: checkEtcdStorage,
		apply: func(kind string, obj *yaml.Node, value string) (bool, error) {
			claims, err := setInClaims(kind, obj, []string{"resources", "requests", "storage"}, value)
			if err != nil || !claims {
				// The single-node release's volume is a PersistentVolume
				// of its own, which the setting does not size: nor does
				// it size that release's quota.
				return claims, err
			}
			q, err := resource.ParseQuantity(value)
			if err != nil {
				return false, err
			}
			_, err = setContainerFlag(kind, obj, "etcd", "--quota-backend-bytes", strconv.FormatInt(EtcdQuota(q.Value()), 10))
			return true, err
		},
	},
	"kos-etcd.storageClassName": {
		help: "StorageClass of etcd's volumes, the members' and the backup claim's (default: the cluster's default StorageClass); first install only, as storage",
		check: func(v string) error {
			if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
				return errors.New(strings.Join(errs, "; "))
			}
			return nil
		},
		apply: func(kind string, obj *yaml.Node, value string) (bool, error) {
			// The backup claim too: a cluster without a default
			// StorageClass would leave it Pending, and every backup
			// Job with it.
			if name := child(child(obj, "metadata"), "name"); kind == "PersistentVolumeClaim" && name != nil && name.Value == "kos-etcd-backup" {
				spec := child(obj, "spec")
				if spec == nil {
					return false, errors.New("the backup claim has no spec")
				}
				setScalar(spec, "storageClassName", value, "!!str")
				return true, nil
			}
			return setInClaims(kind, obj, []string{"storageClassName"}, value)
		},
	},
}

// SettingsHelp describes every setting, one line each, sorted.
func SettingsHelp() string {
	var b strings.Builder
	for _, key := range slices.Sorted(maps.Keys(settings)) {
		fmt.Fprintf(&b, "  %s: %s\n", key, settings[key].help)
	}
	return b.String()
}

// ParseSetting reads ADDON.KEY=VALUE, and checks that the setting is known
// and its value fits.
func ParseSetting(s string) (Setting, error) {
	key, value, ok := strings.Cut(s, "=")
	addon, field, dot := strings.Cut(key, ".")
	if !ok || !dot || addon == "" || field == "" {
		return Setting{}, fmt.Errorf("setting %q: want ADDON.KEY=VALUE", s)
	}
	known, found := settings[key]
	if !found {
		return Setting{}, fmt.Errorf("setting %q: no setting %s (known: %s)", s, key, strings.Join(slices.Sorted(maps.Keys(settings)), ", "))
	}
	if err := known.check(value); err != nil {
		return Setting{}, fmt.Errorf("setting %q: %w", s, err)
	}
	return Setting{Addon: addon, Key: field, Value: value}, nil
}

// checkSettings checks that every setting is known and names an addon the
// tree carries.
func checkSettings(given []Setting, carried []*channels.Addon) error {
	var errs []error
	seen := map[string]bool{}
	for _, s := range given {
		if _, err := ParseSetting(s.String()); err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[s.Addon+"."+s.Key] {
			errs = append(errs, fmt.Errorf("setting %s.%s given twice", s.Addon, s.Key))
		}
		seen[s.Addon+"."+s.Key] = true
		if !slices.ContainsFunc(carried, func(a *channels.Addon) bool { return a.Name == s.Addon }) {
			errs = append(errs, fmt.Errorf("setting %s: the release carries no addon %s", s, s.Addon))
		}
	}
	return errors.Join(errs...)
}

// applySettings applies the settings of addon to its manifest, and returns
// it with the settings that changed an object of it. A manifest no setting
// applies to is returned as it is; one that changes is written again from
// its YAML tree, comments kept.
func applySettings(data []byte, addon string, given []Setting) ([]byte, []Setting, error) {
	var mine []Setting
	for _, s := range given {
		if s.Addon == addon {
			mine = append(mine, s)
		}
	}
	if len(mine) == 0 {
		return data, nil, nil
	}
	var docs []*yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("reading the manifest: %w", err)
		}
		docs = append(docs, &doc)
	}
	var errs []error
	var applied []Setting
	for _, s := range mine {
		set := settings[s.Addon+"."+s.Key]
		changed := false
		for _, doc := range docs {
			if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
				continue
			}
			obj := doc.Content[0]
			kind := ""
			if k := child(obj, "kind"); k != nil {
				kind = k.Value
			}
			did, err := set.apply(kind, obj, s.Value)
			if err != nil {
				errs = append(errs, fmt.Errorf("setting %s: %w", s, err))
			}
			changed = changed || did
		}
		if changed {
			applied = append(applied, s)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	if len(applied) == 0 {
		return data, nil, nil
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	enc.CompactSeqIndent()
	for _, doc := range docs {
		if err := enc.Encode(doc); err != nil {
			return nil, nil, fmt.Errorf("writing the manifest: %w", err)
		}
	}
	if err := enc.Close(); err != nil {
		return nil, nil, fmt.Errorf("writing the manifest: %w", err)
	}
	return out.Bytes(), applied, nil
}

func checkReplicas(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return fmt.Errorf("replicas must be a whole number of at least 1, not %q", v)
	}
	return nil
}

func checkQuantity(v string) error {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return err
	}
	if q.Sign() <= 0 {
		return fmt.Errorf("a volume's size must be positive, not %s", v)
	}
	return nil
}

// The space quota of etcd on a volume of a given size: the volume holds the
// database twice at the worst moment (defragmenting writes the new file
// before it drops the old; a member that fell behind receives the leader's
// whole database) and the WAL and the member's other files (etcdWALBytes:
// 6 WAL files of 64 MiB and 64 MiB more), and etcd advises against quotas
// above etcdMaxQuota. On the default 2Gi volume that is the 800 MiB of the
// kos-etcd 0.3.0 manifest.
const (
	etcdWALBytes  = 448 << 20
	etcdMaxQuota  = 8 << 30
	etcdMinVolume = 1 << 30
)

// EtcdQuota returns the --quota-backend-bytes of an etcd member whose volume
// holds volume bytes.
func EtcdQuota(volume int64) int64 {
	return min((volume-etcdWALBytes)/2, etcdMaxQuota)
}

func checkEtcdStorage(v string) error {
	if err := checkQuantity(v); err != nil {
		return err
	}
	if q := resource.MustParse(v); q.Value() < etcdMinVolume {
		return fmt.Errorf("etcd's volume must hold its WAL and its database twice: at least 1Gi, not %s", v)
	}
	return nil
}

func checkMTU(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil {
		return fmt.Errorf("an MTU must be a whole number, not %q", v)
	}
	if n == 0 {
		return nil
	}
	return fabric.ValidateMTU(n)
}

// setContainerFlag sets the value of flag in the args of the container of a
// DaemonSet or StatefulSet, where the manifest gives it as one argument
// FLAG=VALUE. A workload whose container does not give the flag, as of a
// release older than the flag, is left as it is.
func setContainerFlag(kind string, obj *yaml.Node, container, flag, value string) (bool, error) {
	if kind != "DaemonSet" && kind != "StatefulSet" {
		return false, nil
	}
	containers := child(child(child(child(obj, "spec"), "template"), "spec"), "containers")
	if containers == nil || containers.Kind != yaml.SequenceNode {
		return false, fmt.Errorf("a %s without containers", kind)
	}
	for _, c := range containers.Content {
		if name := child(c, "name"); name == nil || name.Value != container {
			continue
		}
		args := child(c, "args")
		if args == nil || args.Kind != yaml.SequenceNode {
			return false, nil
		}
		for _, a := range args.Content {
			if a.Kind == yaml.ScalarNode && strings.HasPrefix(a.Value, flag+"=") {
				a.Tag, a.Value, a.Style = "!!str", flag+"="+value, 0
				return true, nil
			}
		}
	}
	return false, nil
}

// setReplicas sets spec.replicas of a Deployment.
func setReplicas(kind string, obj *yaml.Node, value string) (bool, error) {
	if kind != "Deployment" {
		return false, nil
	}
	spec := child(obj, "spec")
	if spec == nil || spec.Kind != yaml.MappingNode {
		return false, errors.New("a Deployment without a spec")
	}
	setScalar(spec, "replicas", value, "!!int")
	return true, nil
}

// setInClaims sets the field at path of the spec of every
// volumeClaimTemplate of a StatefulSet.
func setInClaims(kind string, obj *yaml.Node, path []string, value string) (bool, error) {
	if kind != "StatefulSet" {
		return false, nil
	}
	claims := child(child(obj, "spec"), "volumeClaimTemplates")
	if claims == nil || claims.Kind != yaml.SequenceNode {
		return false, nil
	}
	for _, claim := range claims.Content {
		node := child(claim, "spec")
		if node == nil {
			return false, errors.New("a volumeClaimTemplate without a spec")
		}
		for _, key := range path[:len(path)-1] {
			next := child(node, key)
			if next == nil {
				next = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
				node.Content = append(node.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, next)
			}
			node = next
		}
		setScalar(node, path[len(path)-1], value, "!!str")
	}
	return len(claims.Content) > 0, nil
}

// child returns the value of key in a mapping node, or nil.
func child(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// setScalar sets key of a mapping node to a scalar, adding the key when
// missing; comments on an existing value stay.
func setScalar(m *yaml.Node, key, value, tag string) {
	if v := child(m, key); v != nil {
		v.Kind, v.Tag, v.Value, v.Style, v.Content = yaml.ScalarNode, tag, value, 0, nil
		return
	}
	m.Content = append(m.Content,
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key},
		&yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value})
}

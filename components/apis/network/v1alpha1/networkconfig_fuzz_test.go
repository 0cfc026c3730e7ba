package v1alpha1_test

import (
	"encoding/json"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/apis/network/validation"
)

// FuzzNetworkConfigConversion is FuzzNetworkAttachmentConversion for the
// NetworkConfig, and checks the guard against unsafe changes agrees with
// itself: an update that changes no spec is never refused as unsafe, and
// neither is a forced one, however many attachments exist.
func FuzzNetworkConfigConversion(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"network.example.com/v1alpha1","kind":"NetworkConfig","metadata":{"name":"cluster"},"spec":{"overlayMTU":1450,"tunnelPort":4789},"status":{"observedGeneration":1,"overlayMTU":1450,"tunnelPort":4789,"underlay":{"nodesReporting":2,"smallestMTU":1400,"nodesTooSmall":1,"tooSmall":[{"node":"n1","mtu":1400}]},"conditions":[{"type":"Applied","status":"True","observedGeneration":1,"lastTransitionTime":"2026-01-02T03:04:06Z","reason":"Applied","message":"m"}]}}`))
	f.Add([]byte(`{"metadata":{"name":"mine"},"spec":{"overlayMTU":0,"tunnelPort":70000},"status":{"overlayMTU":1}}`))
	f.Add([]byte(`{"metadata":{"name":"cluster","annotations":{"network.example.com/force-unsafe-change":"true"}},"spec":{}}`))
	scheme := fuzzScheme()
	f.Fuzz(func(t *testing.T, data []byte) {
		var in v1alpha1.NetworkConfig
		if err := json.Unmarshal(data, &in); err != nil {
			return
		}
		var internal network.NetworkConfig
		if err := scheme.Convert(&in, &internal, nil); err != nil {
			t.Fatalf("converting to internal: %v", err)
		}
		validation.ValidateNetworkConfig(&internal)
		validation.ValidateNetworkConfigStatusUpdate(&internal, internal.DeepCopy())
		stored := internal.DeepCopy()
		stored.ResourceVersion = "1"
		for _, err := range validation.ValidateNetworkConfigUpdate(stored, stored.DeepCopy(), 3) {
			if err.Type == field.ErrorTypeForbidden {
				t.Fatalf("an update to itself is refused as unsafe: %v", err)
			}
		}
		forced := stored.DeepCopy()
		forced.Annotations = map[string]string{network.ForceUnsafeChangeAnnotation: "true"}
		mtu, port := int32(1000), int32(1000)
		forced.Spec.OverlayMTU, forced.Spec.TunnelPort = &mtu, &port
		for _, err := range validation.ValidateNetworkConfigUpdate(forced, stored, 3) {
			if err.Type == field.ErrorTypeForbidden {
				t.Fatalf("a forced update is refused as unsafe: %v", err)
			}
		}
		var out v1alpha1.NetworkConfig
		if err := scheme.Convert(&internal, &out, nil); err != nil {
			t.Fatalf("converting back: %v", err)
		}
		out.TypeMeta = in.TypeMeta
		if !apiequality.Semantic.DeepEqual(&in, &out) {
			t.Fatalf("round trip changed the config:\n in: %+v\nout: %+v", in, out)
		}
	})
}

package v1alpha1_test

import (
	"encoding/json"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apis/network/install"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/apis/network/validation"
)

func fuzzScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	install.Install(s)
	return s
}

// FuzzNetworkAttachmentConversion decodes arbitrary JSON as a v1alpha1
// NetworkAttachment (and, from the same bytes, an IPLock), converts it to the
// internal version and back, and runs every validation on the internal
// object. Nothing may panic, and the round trip keeps every field.
func FuzzNetworkAttachmentConversion(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"network.example.com/v1alpha1","kind":"NetworkAttachment","metadata":{"namespace":"demo","name":"a1","extendedMetadata":{"writes":[{"section":"spec","serverTime":"2026-01-02T03:04:05.678901Z"}]}},"spec":{"node":"n1","subnet":"s1","ipv4":"10.0.0.5","postCreateExec":["/usr/sbin/ip","link","set","${ifname}","mtu","1400"],"postDeleteExec":["/bin/true"],"subnetName":"s1"},"status":{"ipv4":"10.0.0.5","addressVNI":1,"lockUID":"u","addressContention":true,"errors":{"ipam":["Referenced subnet has run out of IPs"],"host":["x"]},"subnetCreationTime":"2026-01-02T03:04:05Z","macAddress":"06:00:00:05:00:01","ifcName":"kos060000050001","hostIP":"192.168.7.2","postCreateExecReport":{"command":["/bin/true"],"exitStatus":0,"startTime":"2026-01-02T03:04:05Z","stopTime":"2026-01-02T03:04:06Z","stdOut":"o","stdErr":"e"},"conditions":[{"type":"Ready","status":"True","observedGeneration":1,"lastTransitionTime":"2026-01-02T03:04:06Z","reason":"Ready","message":""}]}}`))
	f.Add([]byte(`{"spec":{"postCreateExec":["ip"]},"status":{"ipv4":"::1","hostIP":"x","macAddress":"zz"}}`))
	f.Add([]byte(`{"metadata":{"name":"-bad-","namespace":""},"spec":{"node":"","subnet":"A"}}`))
	scheme := fuzzScheme()
	f.Fuzz(func(t *testing.T, data []byte) {
		var in v1alpha1.NetworkAttachment
		if err := json.Unmarshal(data, &in); err != nil {
			return
		}
		var internal network.NetworkAttachment
		if err := scheme.Convert(&in, &internal, nil); err != nil {
			t.Fatalf("converting to internal: %v", err)
		}
		validation.ValidateNetworkAttachment(&internal)
		validation.ValidateNetworkAttachmentUpdate(&internal, internal.DeepCopy())
		validation.ValidateNetworkAttachmentStatusUpdate(&internal, &network.NetworkAttachment{})
		stored := internal.DeepCopy()
		stored.ResourceVersion = "1"
		if errs := validation.ValidateNetworkAttachmentUpdate(stored, stored.DeepCopy()); len(validation.ValidateNetworkAttachment(&internal)) == 0 && len(errs) > 0 {
			t.Fatalf("a valid attachment may not be updated to itself: %v", errs.ToAggregate())
		}
		var out v1alpha1.NetworkAttachment
		if err := scheme.Convert(&internal, &out, nil); err != nil {
			t.Fatalf("converting back: %v", err)
		}
		out.TypeMeta = in.TypeMeta
		if !apiequality.Semantic.DeepEqual(&in, &out) {
			t.Fatalf("round trip changed the attachment:\n in: %+v\nout: %+v", in, out)
		}

		var lock v1alpha1.IPLock
		if err := json.Unmarshal(data, &lock); err != nil {
			return
		}
		var internalLock network.IPLock
		if err := scheme.Convert(&lock, &internalLock, nil); err != nil {
			t.Fatalf("converting lock to internal: %v", err)
		}
		validation.ValidateIPLock(&internalLock)
		validation.ValidateIPLockUpdate(&internalLock, internalLock.DeepCopy())
		var outLock v1alpha1.IPLock
		if err := scheme.Convert(&internalLock, &outLock, nil); err != nil {
			t.Fatalf("converting lock back: %v", err)
		}
		outLock.TypeMeta = lock.TypeMeta
		if !apiequality.Semantic.DeepEqual(&lock, &outLock) {
			t.Fatalf("round trip changed the lock:\n in: %+v\nout: %+v", lock, outLock)
		}
	})
}

// FuzzSubnetConversion is FuzzNetworkAttachmentConversion for Subnets, and
// checks that validation agrees with itself: a subnet valid on create
// conflicts with no copy of itself under another name only when their
// blocks are disjoint, which they are not.
func FuzzSubnetConversion(f *testing.F) {
	f.Add([]byte(`{"apiVersion":"network.example.com/v1alpha1","kind":"Subnet","metadata":{"namespace":"demo","name":"s1"},"spec":{"ipv4":"10.0.0.0/24","vni":1},"status":{"validated":true,"errors":["e"]}}`))
	f.Add([]byte(`{"metadata":{"name":"s"},"spec":{"ipv4":"172.16.0.0/11","vni":2097152}}`))
	f.Add([]byte(`{"metadata":{"name":"s","namespace":"n"},"spec":{"ipv4":"192.168.1.1/24","vni":7}}`))
	scheme := fuzzScheme()
	f.Fuzz(func(t *testing.T, data []byte) {
		var in v1alpha1.Subnet
		if err := json.Unmarshal(data, &in); err != nil {
			return
		}
		var internal network.Subnet
		if err := scheme.Convert(&in, &internal, nil); err != nil {
			t.Fatalf("converting to internal: %v", err)
		}
		valid := len(validation.ValidateSubnet(&internal)) == 0
		validation.ValidateSubnetStatusUpdate(&internal, internal.DeepCopy())
		stored := internal.DeepCopy()
		stored.ResourceVersion = "1"
		if errs := validation.ValidateSubnetUpdate(stored, stored.DeepCopy()); valid && len(errs) > 0 {
			t.Fatalf("a valid subnet may not be updated to itself: %v", errs.ToAggregate())
		}
		twin := internal.DeepCopy()
		twin.Name += "-twin"
		conflicts := validation.ValidateSubnetConflicts(&internal, []*network.Subnet{twin, internal.DeepCopy()})
		if valid && len(conflicts) != 1 {
			t.Fatalf("a valid subnet has %d conflicts with its twin and itself, want 1: %v", len(conflicts), conflicts.ToAggregate())
		}
		var out v1alpha1.Subnet
		if err := scheme.Convert(&internal, &out, nil); err != nil {
			t.Fatalf("converting back: %v", err)
		}
		out.TypeMeta = in.TypeMeta
		if !apiequality.Semantic.DeepEqual(&in, &out) {
			t.Fatalf("round trip changed the subnet:\n in: %+v\nout: %+v", in, out)
		}
	})
}

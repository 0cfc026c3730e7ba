package apiserver

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/kos-sdn/kos/components/apis/network/install"
)

var (
	// Scheme knows the KOS API group, internal and wire versions, and the
	// meta types the generic server needs.
	Scheme = runtime.NewScheme()
	// Codecs encodes and decodes the types of Scheme.
	Codecs = serializer.NewCodecFactory(Scheme)
)

// withoutProtobuf is what the KOS API group speaks: its serializer without
// protobuf, which KOS's types do not implement (they have no generated
// Marshal methods). A client that asks for protobuf first, as
// kube-controller-manager's namespace controller does when it deletes a
// namespace's objects (the metadata client's DeleteCollection), then gets
// JSON instead of an encoding error, which left every namespace that held
// a KOS object Terminating for ever.
type withoutProtobuf struct{ runtime.NegotiatedSerializer }

func (s withoutProtobuf) SupportedMediaTypes() []runtime.SerializerInfo {
	return slices.DeleteFunc(slices.Clone(s.NegotiatedSerializer.SupportedMediaTypes()), func(i runtime.SerializerInfo) bool {
		return i.MediaType == runtime.ContentTypeProtobuf
	})
}

func init() {
	install.Install(Scheme)
	// The generic server decodes query parameters, such as list and watch
	// options, as the unversioned meta types of the core group.
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	Scheme.AddUnversionedTypes(schema.GroupVersion{Version: "v1"},
		&metav1.Status{},
		&metav1.APIVersions{},
		&metav1.APIGroupList{},
		&metav1.APIGroup{},
		&metav1.APIResourceList{},
	)
}

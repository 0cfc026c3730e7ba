package subnet

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/kos-sdn/kos/components/apis/network"
	"github.com/kos-sdn/kos/components/apis/network/v1alpha1"
	"github.com/kos-sdn/kos/components/apiserver/registry"
)

// UsersFunc returns the names of the NetworkAttachments of a subnet.
type UsersFunc func(ctx context.Context, namespace, subnet string) ([]string, error)

// AttachmentUsers returns the UsersFunc that lists the attachments of a
// subnet through attachments, the storage of NetworkAttachments, by the
// field spec.subnet. The list is a consistent read (no resourceVersion):
// it sees every attachment created before the subnet's deletion began.
func AttachmentUsers(attachments rest.Lister) UsersFunc {
	return func(ctx context.Context, namespace, subnet string) ([]string, error) {
		ctx = genericapirequest.WithNamespace(ctx, namespace)
		obj, err := attachments.List(ctx, &metainternalversion.ListOptions{
			FieldSelector: fields.OneTermEqualSelector(v1alpha1.FieldSubnet, subnet),
		})
		if err != nil {
			return nil, fmt.Errorf("listing the attachments of subnet %s/%s: %w", namespace, subnet, err)
		}
		list, ok := obj.(*network.NetworkAttachmentList)
		if !ok {
			return nil, fmt.Errorf("listing the attachments of subnet %s/%s: got a %T", namespace, subnet, obj)
		}
		names := make([]string, 0, len(list.Items))
		for i := range list.Items {
			names = append(names, list.Items[i].Name)
		}
		return names, nil
	}
}

// ProtectedREST is the storage of the subnets' main endpoint with in-use
// protection: a subnet that NetworkAttachments use cannot be deleted, as
// Kubernetes keeps a PersistentVolumeClaim that pods use. Deleting it would
// leave their interfaces on a network no Subnet holds any more, whose VNI
// another subnet may take.
//
// The deletion is refused, not held by a finalizer: the caller learns at
// once what keeps the subnet, and nothing is left half deleted. The check
// runs inside the deletion, on the subnet being deleted, for a single
// delete and for each subnet of a deletecollection (a namespace's
// deletion retries until the pods' attachments are gone). An attachment
// created while the deletion is under way can still slip past it; IPAM
// then tells it that its subnet is missing and gives it no address.
type ProtectedREST struct {
	*registry.REST
	users UsersFunc
}

// NewProtectedREST returns the storage rest, whose subnets users tells the
// users of.
func NewProtectedREST(rest *registry.REST, users UsersFunc) *ProtectedREST {
	return &ProtectedREST{REST: rest, users: users}
}

// Delete deletes the subnet name unless attachments use it.
func (r *ProtectedREST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	return r.REST.Delete(ctx, name, r.unused(deleteValidation), options)
}

// DeleteCollection deletes the subnets listOptions selects; those that
// attachments use stay, and the first such refusal is returned.
func (r *ProtectedREST) DeleteCollection(ctx context.Context, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions, listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	return r.REST.DeleteCollection(ctx, r.unused(deleteValidation), options, listOptions)
}

// maxNamed is how many attachments a refusal names.
const maxNamed = 5

// unused returns a deletion check that runs validate (admission), then
// refuses the deletion of a subnet that attachments use.
func (r *ProtectedREST) unused(validate rest.ValidateObjectFunc) rest.ValidateObjectFunc {
	return func(ctx context.Context, obj runtime.Object) error {
		if validate != nil {
			if err := validate(ctx, obj); err != nil {
				return err
			}
		}
		s, ok := obj.(*network.Subnet)
		if !ok {
			return apierrors.NewInternalError(fmt.Errorf("deleting a subnet: got a %T", obj))
		}
		users, err := r.users(ctx, s.Namespace, s.Name)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		if len(users) == 0 {
			return nil
		}
		return apierrors.NewConflict(network.Resource("subnets"), s.Name, InUseError(users))
	}
}

// InUseError returns the reason the deletion of a subnet that the
// attachments named users use is refused.
func InUseError(users []string) error {
	named := users[:min(len(users), maxNamed)]
	list := strings.Join(named, ", ")
	if len(users) > len(named) {
		list += fmt.Sprintf(" and %d more", len(users)-len(named))
	}
	noun := "NetworkAttachments use"
	if len(users) == 1 {
		noun = "NetworkAttachment uses"
	}
	return fmt.Errorf("subnet in use: %d %s it (%s); a pod's attachment goes with its pod, delete the others first", len(users), noun, list)
}

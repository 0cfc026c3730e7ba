package channels

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
)

// heldShown bounds the kept objects a keep reason names.
const heldShown = 5

// heldResource is a resource whose objects keptIn or keptOf lists.
type heldResource struct {
	gvr schema.GroupVersionResource
	gk  schema.GroupKind
}

// keptIn lists, as "Kind namespace/name", the objects in a Namespace that
// delete keeps (see protection: annotated KeepAnnotation, or
// PersistentVolumeClaims not annotated DeletableAnnotation) and that
// deleting the Namespace would delete with it, whichever addon, or none,
// they belong to: a claim a StatefulSet made holds data as much as one a
// release declares. It lists every namespaced kind the server serves,
// metadata only (see kept). Kinds whose API group does not answer
// discovery or lists (an aggregated API whose server is down) are passed
// over: the namespace controller cannot delete them either until it
// answers.
func (c *Client) keptIn(ctx context.Context, namespace string) ([]string, error) {
	lists, err := c.Discovery.ServerPreferredNamespacedResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		return nil, fmt.Errorf("finding the kinds namespace %s may hold: %w", namespace, err)
	}
	var resources []heldResource
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			if !slices.Contains(r.Verbs, "list") || !slices.Contains(r.Verbs, "delete") {
				continue
			}
			resources = append(resources, heldResource{gvr: gv.WithResource(r.Name), gk: gv.WithKind(r.Kind).GroupKind()})
		}
	}
	return c.kept(ctx, resources, namespace)
}

// keptOf lists, as keptIn does, the objects of kind gk, a CRD's, that
// delete keeps and that deleting the CRD would delete with it; none when
// the server does not serve the kind.
func (c *Client) keptOf(ctx context.Context, gk schema.GroupKind) ([]string, error) {
	m, err := c.mapping(ctx, gk.WithVersion(""), false)
	if meta.IsNoMatchError(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("finding kind %s: %w", gk, err)
	}
	return c.kept(ctx, []heldResource{{gvr: m.Resource, gk: gk}}, "")
}

// kept lists the resources' objects, in namespace ("" for all, or
// cluster-scoped), as their metadata, and returns those delete keeps,
// sorted. Objects being deleted, or owned by a controller (deleted with
// their owner whatever happens to what holds them), do not count.
func (c *Client) kept(ctx context.Context, resources []heldResource, namespace string) ([]string, error) {
	scan := c.scan
	if scan == nil {
		scan = c.Metadata
	}
	found := make([][]string, len(resources))
	w := &addonWriter{client: c, parallelism: defaultParallelism}
	err := w.each(ctx, len(resources), func(ctx context.Context, i int) error {
		r := resources[i]
		opts := metav1.ListOptions{Limit: listLimit}
		for {
			list, err := scan.Resource(r.gvr).Namespace(namespace).List(ctx, opts)
			switch {
			case apierrors.IsNotFound(err), apierrors.IsServiceUnavailable(err), apierrors.IsMethodNotSupported(err):
				return nil
			case err != nil:
				if namespace != "" {
					return fmt.Errorf("listing %s in namespace %s: %w", r.gk, namespace, err)
				}
				return fmt.Errorf("listing %s: %w", r.gk, err)
			}
			for _, obj := range list.Items {
				if obj.DeletionTimestamp != nil || metav1.GetControllerOfNoCopy(&obj) != nil {
					continue
				}
				if protectionOf(r.gk, obj.Annotations, false) != "" {
					found[i] = append(found[i], ObjectKey{GroupKind: r.gk, Namespace: obj.Namespace, Name: obj.Name}.String())
				}
			}
			if list.Continue == "" {
				return nil
			}
			opts.Continue = list.Continue
		}
	})
	if err != nil {
		return nil, err
	}
	out := slices.Concat(found...)
	slices.Sort(out)
	return slices.Compact(out), nil
}

// holds is why a Namespace or CRD (key) that holds kept objects is not
// deleted, with what to do about it; "" when it holds none.
func (c *Client) holds(ctx context.Context, key ObjectKey, defines schema.GroupKind) (string, error) {
	var kept []string
	var err error
	var command string
	switch {
	case key.IsNamespace():
		kept, err = c.keptIn(ctx, key.Name)
		command = "kubectl delete namespace " + key.Name
	case key.GroupKind == crdKind && !defines.Empty():
		kept, err = c.keptOf(ctx, defines)
		command = "kubectl delete crd " + key.Name
	}
	if err != nil || len(kept) == 0 {
		return "", err
	}
	names := strings.Join(kept, ", ")
	if len(kept) > heldShown {
		names = fmt.Sprintf("%s and %d more", strings.Join(kept[:heldShown], ", "), len(kept)-heldShown)
	}
	return fmt.Sprintf("it holds objects channels keeps, which deleting it would delete: %s; to delete it, delete them yourself first (their data go with them), then the %s (%s)",
		names, key.GroupKind.Kind, command), nil
}

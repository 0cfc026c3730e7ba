package apiserver

import (
	"context"

	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// collectionFirst returns an authorizer that asks inner about a resource
// request first as if it named no object and selected nothing (the request
// on the whole collection), and only when that is not allowed about the
// request itself.
//
// Authorization is delegated to the main cluster, one SubjectAccessReview
// per distinct question, cached for a while; a question names the object
// (an update of one attachment's status) and, since Kubernetes 1.31, a
// list's or watch's selectors (an agent's watch of one network). So every
// attachment cost two reviews (IPAM's and its agent's status writes) and
// every network an agent starts watching more: 2.5 reviews per attachment
// at 100 agents in BenchmarkAgents. The collection's question is the same
// for every object and selector, so its answer comes from the cache.
//
// It allows nothing inner would not: an empty name or selector asks about
// every object (SubjectAccessReview's ResourceAttributes), so an
// authorizer that allows it allows each one; RBAC does so by definition.
// A request the collection's question does not allow is asked as it is,
// which costs a second question only for requests that a role limits by
// resourceNames, or that are denied.
func collectionFirst(inner authorizer.Authorizer) authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if !a.IsResourceRequest() || !narrowed(a) {
			return inner.Authorize(ctx, a)
		}
		collection := authorizer.AttributesRecord{
			User:            a.GetUser(),
			Verb:            a.GetVerb(),
			Namespace:       a.GetNamespace(),
			APIGroup:        a.GetAPIGroup(),
			APIVersion:      a.GetAPIVersion(),
			Resource:        a.GetResource(),
			Subresource:     a.GetSubresource(),
			ResourceRequest: true,
			Path:            a.GetPath(),
		}
		if decision, reason, err := inner.Authorize(ctx, collection); decision == authorizer.DecisionAllow && err == nil {
			return decision, reason, nil
		}
		return inner.Authorize(ctx, a)
	})
}

// narrowed reports whether a names an object or selects by field or label.
func narrowed(a authorizer.Attributes) bool {
	if a.GetName() != "" {
		return true
	}
	fieldReqs, fieldErr := a.GetFieldSelector()
	labelReqs, labelErr := a.GetLabelSelector()
	return len(fieldReqs) > 0 || len(labelReqs) > 0 || fieldErr != nil || labelErr != nil
}

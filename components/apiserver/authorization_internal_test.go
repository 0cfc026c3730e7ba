package apiserver

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// question is what collectionFirst asked its inner authorizer.
type question struct {
	verb, name string
	selects    bool
}

func TestCollectionFirst(t *testing.T) {
	agent := &user.DefaultInfo{Name: "system:serviceaccount:kos-node:kos-agent"}
	byNode := fields.Requirements{{Field: "spec.node", Operator: selection.Equals, Value: "n1"}}
	tests := []struct {
		name string
		attr authorizer.AttributesRecord
		// collection and named are what inner answers the collection's
		// question and the request's own.
		collection, named authorizer.Decision
		want              authorizer.Decision
		wantAsked         []question
	}{{
		name:       "a status write allowed on the collection",
		attr:       authorizer.AttributesRecord{User: agent, Verb: "update", Resource: "networkattachments", Subresource: "status", Name: "a1", ResourceRequest: true},
		collection: authorizer.DecisionAllow, named: authorizer.DecisionDeny,
		want:      authorizer.DecisionAllow,
		wantAsked: []question{{verb: "update"}},
	}, {
		name:       "a watch by selector allowed on the collection",
		attr:       authorizer.AttributesRecord{User: agent, Verb: "watch", Resource: "networkattachments", FieldSelectorRequirements: byNode, ResourceRequest: true},
		collection: authorizer.DecisionAllow, named: authorizer.DecisionDeny,
		want:      authorizer.DecisionAllow,
		wantAsked: []question{{verb: "watch"}},
	}, {
		name:       "allowed by resource name only",
		attr:       authorizer.AttributesRecord{User: agent, Verb: "get", Resource: "apiservices", Name: "v1alpha1.network.example.com", ResourceRequest: true},
		collection: authorizer.DecisionNoOpinion, named: authorizer.DecisionAllow,
		want:      authorizer.DecisionAllow,
		wantAsked: []question{{verb: "get"}, {verb: "get", name: "v1alpha1.network.example.com"}},
	}, {
		name:       "denied both ways",
		attr:       authorizer.AttributesRecord{User: agent, Verb: "list", Resource: "networkattachments", FieldSelectorRequirements: byNode, ResourceRequest: true},
		collection: authorizer.DecisionNoOpinion, named: authorizer.DecisionNoOpinion,
		want:      authorizer.DecisionNoOpinion,
		wantAsked: []question{{verb: "list"}, {verb: "list", selects: true}},
	}, {
		name:       "a request on the collection is asked once",
		attr:       authorizer.AttributesRecord{User: agent, Verb: "create", Resource: "networkattachments", ResourceRequest: true},
		collection: authorizer.DecisionNoOpinion, named: authorizer.DecisionNoOpinion,
		want:      authorizer.DecisionNoOpinion,
		wantAsked: []question{{verb: "create"}},
	}, {
		name:       "a non-resource request is asked as it is",
		attr:       authorizer.AttributesRecord{User: agent, Verb: "get", Path: "/healthz"},
		collection: authorizer.DecisionAllow, named: authorizer.DecisionAllow,
		want:      authorizer.DecisionAllow,
		wantAsked: []question{{verb: "get"}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var asked []question
			inner := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
				q := question{verb: a.GetVerb(), name: a.GetName()}
				fieldReqs, _ := a.GetFieldSelector()
				q.selects = len(fieldReqs) > 0
				asked = append(asked, q)
				if a.IsResourceRequest() && q == (question{verb: q.verb}) {
					return tc.collection, "", nil
				}
				return tc.named, "", nil
			})
			got, _, err := collectionFirst(inner).Authorize(context.Background(), tc.attr)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("decision %v, want %v", got, tc.want)
			}
			if diff := cmp.Diff(asked, tc.wantAsked, cmp.AllowUnexported(question{})); diff != "" {
				t.Errorf("questions asked (-got +want):\n%s", diff)
			}
		})
	}
}

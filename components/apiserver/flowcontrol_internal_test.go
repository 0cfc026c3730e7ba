package apiserver

import (
	"net/http/httptest"
	"net/url"
	"testing"

	"k8s.io/apiserver/pkg/endpoints/request"
)

func TestIndexedWatch(t *testing.T) {
	tests := []struct {
		name     string
		info     request.RequestInfo
		selector string
		want     bool
	}{
		{"a node's attachments", request.RequestInfo{Verb: "watch", APIGroup: "network.example.com", Resource: "networkattachments"}, "spec.node=n1", true},
		{"a network's attachments with a host", request.RequestInfo{Verb: "watch", APIGroup: "network.example.com", Resource: "networkattachments", Namespace: "ns"}, "status.addressVNI=7,status.hostIP!=", true},
		{"every attachment", request.RequestInfo{Verb: "watch", APIGroup: "network.example.com", Resource: "networkattachments"}, "", false},
		{"not a node", request.RequestInfo{Verb: "watch", APIGroup: "network.example.com", Resource: "networkattachments"}, "spec.node!=n1", false},
		{"by subnet", request.RequestInfo{Verb: "watch", APIGroup: "network.example.com", Resource: "networkattachments", Namespace: "ns"}, "spec.subnet=s1", false},
		{"a list", request.RequestInfo{Verb: "list", APIGroup: "network.example.com", Resource: "networkattachments"}, "spec.node=n1", false},
		{"IP locks", request.RequestInfo{Verb: "watch", APIGroup: "network.example.com", Resource: "iplocks"}, "spec.node=n1", false},
		{"pods", request.RequestInfo{Verb: "watch", Resource: "pods"}, "spec.node=n1", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/?fieldSelector="+url.QueryEscape(tc.selector), nil)
			info := tc.info
			r = r.WithContext(request.WithRequestInfo(r.Context(), &info))
			if got := indexedWatch(r); got != tc.want {
				t.Errorf("indexedWatch(%s ?fieldSelector=%s) = %v, want %v", tc.info.Resource, tc.selector, got, tc.want)
			}
		})
	}
}

package subnet

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kos-sdn/kos/components/apis/network"
)

func TestProtectedDeleteCheck(t *testing.T) {
	attachments := func(n int) []string {
		var names []string
		for i := range n {
			names = append(names, fmt.Sprintf("web-%d-net1", i))
		}
		return names
	}
	refusedByAdmission := errors.New("refused by admission")
	tests := []struct {
		name      string
		users     []string
		usersErr  error
		admission error
		wantAsked bool
		want      string // "" means allowed
		wantCheck func(error) bool
	}{
		{name: "unused", wantAsked: true},
		{name: "one attachment", users: attachments(1), wantAsked: true, wantCheck: apierrors.IsConflict,
			want: `Operation cannot be fulfilled on subnets.network.example.com "s": subnet in use: 1 NetworkAttachment uses it (web-0-net1); a pod's attachment goes with its pod, delete the others first`},
		{name: "seven attachments", users: attachments(7), wantAsked: true, wantCheck: apierrors.IsConflict,
			want: `Operation cannot be fulfilled on subnets.network.example.com "s": subnet in use: 7 NetworkAttachments use it (web-0-net1, web-1-net1, web-2-net1, web-3-net1, web-4-net1 and 2 more); a pod's attachment goes with its pod, delete the others first`},
		{name: "the list fails", usersErr: errors.New("etcd is away"), wantAsked: true, wantCheck: apierrors.IsInternalError,
			want: "Internal error occurred: etcd is away"},
		{name: "admission refuses first", admission: refusedByAdmission, want: "refused by admission",
			wantCheck: func(err error) bool { return errors.Is(err, refusedByAdmission) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var asked []string
			r := NewProtectedREST(nil, func(_ context.Context, namespace, subnet string) ([]string, error) {
				asked = append(asked, namespace+"/"+subnet)
				return tc.users, tc.usersErr
			})
			check := r.unused(func(context.Context, runtime.Object) error { return tc.admission })
			err := check(context.Background(), subnet("ns", "s", "10.0.0.0/24", 5))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("got %v, want allowed", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Errorf("got %v, want %q", err, tc.want)
			case tc.wantCheck != nil && !tc.wantCheck(err):
				t.Errorf("got %#v, not of the kind wanted", err)
			}
			var wantAsked []string
			if tc.wantAsked {
				wantAsked = []string{"ns/s"}
			}
			if diff := cmp.Diff(asked, wantAsked); diff != "" {
				t.Errorf("attachments asked for (-got +want):\n%s", diff)
			}
		})
	}
	if err := NewProtectedREST(nil, func(context.Context, string, string) ([]string, error) { return nil, nil }).unused(nil)(context.Background(), &network.Subnet{}); err != nil {
		t.Errorf("without admission: %v", err)
	}
}

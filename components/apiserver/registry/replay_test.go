package registry

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/storage"

	"github.com/kos-sdn/kos/components/apis/network"
)

// oneKey is an in-memory storage of one key, whose writes fail as told:
// each call of Create or GuaranteedUpdate takes the next of fails, if any,
// and fails with its error, after applying the write if applied says so.
type oneKey struct {
	storage.Interface
	stored *network.Subnet
	rev    int
	fails  []failure
	// writes counts the calls of Create and GuaranteedUpdate.
	writes int
}

type failure struct {
	err     error
	applied bool
}

func (s *oneKey) next() (failure, bool) {
	s.writes++
	if len(s.fails) == 0 {
		return failure{}, false
	}
	f := s.fails[0]
	s.fails = s.fails[1:]
	return f, true
}

func (s *oneKey) store(obj runtime.Object) {
	s.rev++
	s.stored = obj.(*network.Subnet).DeepCopy()
	s.stored.ResourceVersion = strconv.Itoa(s.rev)
}

func (s *oneKey) Get(_ context.Context, key string, _ storage.GetOptions, out runtime.Object) error {
	if s.stored == nil {
		return storage.NewKeyNotFoundError(key, 0)
	}
	s.stored.DeepCopyInto(out.(*network.Subnet))
	return nil
}

func (s *oneKey) Create(ctx context.Context, key string, obj, out runtime.Object, _ uint64) error {
	f, failing := s.next()
	if failing && !f.applied {
		return f.err
	}
	if s.stored != nil {
		return storage.NewKeyExistsError(key, 0)
	}
	s.store(obj)
	if failing {
		return f.err
	}
	return s.Get(ctx, key, storage.GetOptions{}, out)
}

func (s *oneKey) GuaranteedUpdate(ctx context.Context, key string, destination runtime.Object, _ bool, _ *storage.Preconditions, tryUpdate storage.UpdateFunc, _ runtime.Object) error {
	if s.stored == nil {
		return storage.NewKeyNotFoundError(key, 0)
	}
	obj, _, err := tryUpdate(s.stored.DeepCopy(), storage.ResponseMeta{})
	if err != nil {
		return err
	}
	f, failing := s.next()
	if failing && !f.applied {
		return f.err
	}
	s.store(obj)
	if failing {
		return f.err
	}
	return s.Get(ctx, key, storage.GetOptions{}, destination)
}

func (s *oneKey) Delete(ctx context.Context, key string, out runtime.Object, _ *storage.Preconditions, validate storage.ValidateObjectFunc, _ runtime.Object, _ storage.DeleteOptions) error {
	if s.stored == nil {
		return storage.NewKeyNotFoundError(key, 0)
	}
	if err := validate(ctx, s.stored.DeepCopy()); err != nil {
		return err
	}
	f, failing := s.next()
	if failing && !f.applied {
		return f.err
	}
	s.stored.DeepCopyInto(out.(*network.Subnet))
	s.stored = nil
	if failing {
		return f.err
	}
	return nil
}

// bump counts the updates applied to a subnet in its label "n".
func bump(input runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
	s := input.(*network.Subnet).DeepCopy()
	n, _ := strconv.Atoi(s.Labels["n"])
	s.Labels = map[string]string{"n": strconv.Itoa(n + 1)}
	return s, nil, nil
}

func TestReplayingStorage(t *testing.T) {
	replayPause = 0
	timedOut := rpctypes.ErrTimeout // as etcd's client hands it over
	reset := status.Error(codes.Unavailable, "error reading from server: connection reset by peer")
	invalid := status.Error(codes.InvalidArgument, "etcdserver: too many operations in txn request")
	ours := &network.Subnet{ObjectMeta: metav1.ObjectMeta{Name: "s", UID: "ours"}}
	theirs := &network.Subnet{ObjectMeta: metav1.ObjectMeta{Name: "s", UID: "theirs", ResourceVersion: "1"}}
	existing := &network.Subnet{ObjectMeta: metav1.ObjectMeta{Name: "s", UID: "ours", ResourceVersion: "1"}}

	tests := []struct {
		name           string
		update, delete bool
		stored         *network.Subnet
		fails          []failure
		// wantErr: nil, one of the errors above, or errExists.
		wantErr error
		// wantWrites is how often the write was sent; wantN how often an
		// update was applied ("" for none).
		wantWrites int
		wantUID    types.UID
		wantN      string
	}{
		{name: "create not applied, sent again", fails: []failure{{err: timedOut}}, wantWrites: 2, wantUID: "ours"},
		{name: "create applied, found", fails: []failure{{err: reset, applied: true}}, wantWrites: 2, wantUID: "ours"},
		{name: "create not applied, another object there", stored: theirs, fails: []failure{{err: timedOut}}, wantErr: errExists, wantWrites: 2, wantUID: "theirs"},
		{name: "create failing every time", fails: []failure{{err: timedOut}, {err: reset}, {err: timedOut}}, wantErr: timedOut, wantWrites: 3},
		{name: "create failed for sure, not sent again", fails: []failure{{err: invalid}}, wantErr: invalid, wantWrites: 1},
		{name: "update not applied, sent again", update: true, stored: existing, fails: []failure{{err: timedOut}}, wantWrites: 2, wantUID: "ours", wantN: "1"},
		{name: "update applied, not sent again", update: true, stored: existing, fails: []failure{{err: reset, applied: true}}, wantErr: reset, wantWrites: 1, wantUID: "ours", wantN: "1"},
		{name: "update not applied, then applied when sent again", update: true, stored: existing, fails: []failure{{err: reset}, {err: timedOut, applied: true}}, wantErr: timedOut, wantWrites: 2, wantUID: "ours", wantN: "1"},
		{name: "delete not applied, sent again", delete: true, stored: existing, fails: []failure{{err: timedOut}}, wantWrites: 2, wantUID: ""},
		{name: "delete applied, not sent again", delete: true, stored: existing, fails: []failure{{err: reset, applied: true}}, wantErr: reset, wantWrites: 1, wantUID: ""},
		{name: "delete failed for sure, not sent again", delete: true, stored: existing, fails: []failure{{err: invalid}}, wantErr: invalid, wantWrites: 1, wantUID: "ours"},
		{name: "update failed for sure, not sent again", update: true, stored: existing, fails: []failure{{err: invalid}}, wantErr: invalid, wantWrites: 1, wantUID: "ours"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inner := &oneKey{fails: tt.fails}
			if tt.stored != nil {
				inner.store(tt.stored)
				inner.rev = 1
			}
			s := &replayingStorage{Interface: inner}
			out := &network.Subnet{}
			var err error
			switch {
			case tt.update:
				err = s.GuaranteedUpdate(t.Context(), "k", out, false, nil, bump, nil)
			case tt.delete:
				err = s.Delete(t.Context(), "k", out, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{})
			default:
				err = s.Create(t.Context(), "k", ours.DeepCopy(), out, 0)
			}
			if tt.wantErr == errExists {
				if !storage.IsExist(err) {
					t.Errorf("error %v, want AlreadyExists", err)
				}
			} else if !errors.Is(err, tt.wantErr) {
				t.Errorf("error %v, want %v", err, tt.wantErr)
			}
			if inner.writes != tt.wantWrites {
				t.Errorf("%d writes sent, want %d", inner.writes, tt.wantWrites)
			}
			var gotUID types.UID
			var gotN string
			if inner.stored != nil {
				gotUID, gotN = inner.stored.UID, inner.stored.Labels["n"]
			}
			if gotUID != tt.wantUID || gotN != tt.wantN {
				t.Errorf("stored UID %q, n %q; want %q, %q", gotUID, gotN, tt.wantUID, tt.wantN)
			}
			if err == nil && !tt.delete && out.UID != tt.wantUID {
				t.Errorf("answered UID %q, want %q", out.UID, tt.wantUID)
			}
		})
	}
}

// errExists stands for any AlreadyExists error of the storage.
var errExists = errors.New("exists")

// Package registry holds what the storage of every KOS resource shares: the REST
// types the API installer serves, with the names and category kubectl knows them
// by, and the building of server-side tables. The per-resource strategies and
// stores live in the subpackages.
package registry

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta/table"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Category is the category of every KOS resource: `kubectl get kos` lists them all.
const Category = "kos"

// REST is the storage of a KOS resource's main endpoint.
type REST struct {
	*genericregistry.Store
	shortNames []string
}

// NewREST returns the storage of a resource served by store, known to kubectl
// also by shortNames.
func NewREST(store *genericregistry.Store, shortNames ...string) *REST {
	return &REST{Store: store, shortNames: shortNames}
}

var (
	_ rest.ShortNamesProvider = &REST{}
	_ rest.CategoriesProvider = &REST{}
)

// ShortNames returns the short names of the resource.
func (r *REST) ShortNames() []string { return r.shortNames }

// Categories returns the categories of the resource.
func (r *REST) Categories() []string { return []string{Category} }

// StatusREST is the storage of a resource's status subresource. It shares the
// main endpoint's store but updates through a strategy that keeps everything
// except the status.
type StatusREST struct {
	store *genericregistry.Store
}

// NewStatusREST returns the status storage of the resource main serves,
// updating with strategy.
func NewStatusREST(main *genericregistry.Store, strategy interface {
	rest.RESTUpdateStrategy
	rest.ResetFieldsStrategy
}) *StatusREST {
	store := *main
	store.UpdateStrategy = strategy
	store.ResetFieldsStrategy = strategy
	return &StatusREST{store: &store}
}

var (
	_ rest.Patcher             = &StatusREST{}
	_ rest.TableConvertor      = &StatusREST{}
	_ rest.ResetFieldsStrategy = &StatusREST{}
)

// New returns an empty object of the resource.
func (r *StatusREST) New() runtime.Object { return r.store.New() }

// Destroy does nothing: the underlying storage belongs to the main endpoint,
// which destroys it.
func (r *StatusREST) Destroy() {}

// Get returns the object named name.
func (r *StatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// Update changes the status of the object named name. A subresource never
// creates its object, whatever forceAllowCreate says.
func (r *StatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, _ bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

// GetResetFields returns the fields a status update leaves as they were.
func (r *StatusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

// ConvertToTable renders objects as the main endpoint does.
func (r *StatusREST) ConvertToTable(ctx context.Context, object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}

// Table renders objects of one type as server-side tables: a Name column, the
// resource's own columns, and an Age column.
type Table[T runtime.Object] struct {
	// Columns are the resource's own columns.
	Columns []metav1.TableColumnDefinition
	// Cells returns the cells of obj's own columns; empty strings show as
	// <none>.
	Cells func(obj T) []any
}

var _ rest.TableConvertor = Table[runtime.Object]{}

// ConvertToTable renders object, one object or a list, as a table.
func (t Table[T]) ConvertToTable(_ context.Context, object, tableOptions runtime.Object) (*metav1.Table, error) {
	out := &metav1.Table{}
	if l, ok := object.(metav1.ListMetaAccessor); ok {
		m := l.GetListMeta()
		out.ResourceVersion = m.GetResourceVersion()
		out.Continue = m.GetContinue()
		out.RemainingItemCount = m.GetRemainingItemCount()
	}
	rows, err := table.MetaToTableRow(object, func(obj runtime.Object, _ metav1.Object, name, age string) ([]any, error) {
		typed, ok := obj.(T)
		if !ok {
			return nil, fmt.Errorf("rendering a table: unexpected object of type %T", obj)
		}
		cells := []any{name}
		for _, c := range t.Cells(typed) {
			// kubectl shows an empty cell as a gap that shifts the columns.
			if c == "" {
				c = "<none>"
			}
			cells = append(cells, c)
		}
		return append(cells, age), nil
	})
	if err != nil {
		return nil, err
	}
	out.Rows = rows
	if opts, ok := tableOptions.(*metav1.TableOptions); !ok || !opts.NoHeaders {
		out.ColumnDefinitions = append([]metav1.TableColumnDefinition{{
			Name: "Name", Type: "string", Format: "name", Description: "Name of the object, unique in its namespace.",
		}}, t.Columns...)
		out.ColumnDefinitions = append(out.ColumnDefinitions, metav1.TableColumnDefinition{
			Name: "Age", Type: "date", Description: "Time since the object was created.",
		})
	}
	return out, nil
}

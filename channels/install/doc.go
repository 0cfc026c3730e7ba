// Package install says what is installed of each addon on a cluster and
// decides whether a release of a channel applies over it.
//
// It reads the install records (annotations addons.k8s.io/<name> on a
// namespace, in kOps's format and a superset of it) and the pending
// releases that runs which did not finish left beside them (Records,
// ReadInstalled); learns the version of a record that carries none from
// the channel it names (RecordVersions); and weighs each release against
// them (Decide: never downgrade without consent, never jump over a
// release's upgradesFrom, finish, complete or roll back a pending release).
// A Plan holds the decisions of a run, shows them as a table and names the
// addons it leaves behind their channels (Blocked, Problems).
//
// It writes nothing to the cluster and applies nothing: package channels
// makes plans with it (Client.Plan), applies them and writes the records.
// It imports of channels only channel (loading) and api; tools/verify.sh
// keeps it so.
package install

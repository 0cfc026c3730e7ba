// Package etcdbackup provides backups of the KOS API's etcd (the kos-etcd
// addon) that restore: Save takes a snapshot through etcd's maintenance API
// and writes it atomically into a folder, beside a sha256sum file;
// Prune keeps the newest of them; an S3 store (NewS3) keeps copies off the
// cluster; Defragment gives back the space of each member in turn, only
// where enough is free; Restore makes a member's data folder from a snapshot,
// refusing one whose hashes do not match before it touches anything.
//
// A snapshot file is what etcd streams: the bbolt database followed by its
// SHA-256, which etcd itself checks on restore. The sidecar file
// <snapshot>.sha256 holds the SHA-256 of the whole file in sha256sum's format
// (sha256sum -c checks it), so that a copy damaged in storage or in transit
// is found before a restore, not during one.
//
// Like the other KOS commands, kos-etcd-backup goes Options → Complete →
// Validate → run; the cobra command (NewCommand) is the only place with
// flags.
package etcdbackup

// Package catalog says which container images KOS ships, what each one
// holds, and builds them with tools/images, without a container engine:
//
//   - kos.example.com/kos-apiserver:<v>: kos-apiserver, kos-pki (the init
//     container of the etcd and kos-apiserver pods) and kos-etcd-backup
//     (the backup CronJob of kos-etcd), in /usr/local/bin;
//   - kos.example.com/kos-controller-manager:<v>;
//   - kos.example.com/kos-agent:<v>: kos-agent, kos-ovs with the host's Open
//     vSwitch daemons and clients (ovs-vsctl, ovs-ofctl, ovs-appctl) and
//     their libraries, and kos-cni, which an init container installs as the
//     node's CNI plugin kos;
//   - kos.example.com/etcd:<etcd's version>: the etcd tools/etcd builds;
//   - the pause image (tools/images.PauseTag), which a node without a
//     registry names as its sandbox image.
//
// The tags of the component images are the versions of the addons that ship
// them (AddonVersions), so that the manifests of the newest releases name
// exactly the images built. Images run as root unless a manifest says
// otherwise: the manifests choose users, and an image user would leak into
// init containers that share files with their pods' other containers.
//
// A released version's images are not today's programs with an old tag:
// BuildReleased builds them from the commit that made the release
// (Releases) with that commit's own tooling, and PushArchive pushes them.
package catalog

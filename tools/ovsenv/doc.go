// Package ovsenv runs real, isolated Open vSwitch instances for tests and the
// demo, and the network namespaces and veth pairs that make simulated nodes.
//
// An Instance has its own folder: a conf.db created from the installed
// vswitch schema, a run dir with the daemons' sockets and pid files, and
// their logs. Its ovsdb-server and ovs-vswitchd run inside a network
// namespace, by default a new one that belongs to the instance, so that the
// interfaces a userspace-datapath switch creates (one per bridge and internal
// port) never meet those of another instance or of the host. Tools find an
// instance through OVS_RUNDIR, which Instance.Env and Instance.Command set;
// ovs-vsctl, ovs-ofctl and ovs-appctl reach the daemons over Unix sockets in
// the run dir, so they work from any namespace. Many instances can run at
// once.
//
// The daemons are this program's children: they get SIGKILL when it dies,
// however that happens, and Stop ends them in order (ovs-vswitchd, then
// ovsdb-server, each first asked to exit through ovs-appctl) and removes what
// Start created. With Options.Detach they outlive this program instead, and
// Attach finds them again from their folder. Namespaces and folders that a
// process left behind when it died before it could stop its instances are
// removed by the next process that starts one.
//
// Only the userspace datapath is assumed: create bridges with
// datapath_type=netdev in the same ovs-vsctl command that adds them.
package ovsenv

// Package nodeovs runs a node's Open vSwitch inside a container of the KOS
// agent's pod, so that a node needs no Open vSwitch package: kos-ovs creates
// (or converts) the database from the schema the image ships, runs
// ovsdb-server and ovs-vswitchd in the foreground with the run and database
// folders it is given (host paths, so that the database and with it the
// bridges and ports outlive the container), and supervises them: when
// either daemon dies it stops the other and fails, so that kubelet restarts
// the container and with it both daemons; when asked to stop it asks each
// daemon to exit.
//
// With OVS's userspace datapath (netdev), nodes tunnel from an address that
// lives on an OVS bridge: given the node's underlay address, Server moves
// that address, with the routes through its interface, from the interface
// onto bridge br-ul, which holds the interface as a port (see Underlay).
// ovs-vswitchd recreates br-ul's kernel device, empty, whenever it starts,
// so the move is recorded in the database folder and done again after every
// start. The kernel datapath needs none of this.
package nodeovs

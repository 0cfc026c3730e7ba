package cniserver

import (
	"fmt"
	"regexp"
)

// hostVethName matches the names of attachments' interfaces
// (v1alpha1.InterfaceName), which the host ends of pods' veth pairs have.
var hostVethName = regexp.MustCompile(`^kos[0-9a-f]{12}$`)

// HostVeths returns the names of the host ends of pods' veth pairs in the
// network namespace at hostNetns (the agent's own when empty): the veths
// named as attachments' interfaces.
func HostVeths(hostNetns string) ([]string, error) {
	h, err := handleAt(hostNetns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing interfaces: %w", err)
	}
	var names []string
	for _, l := range links {
		if name := l.Attrs().Name; l.Type() == "veth" && hostVethName.MatchString(name) {
			names = append(names, name)
		}
	}
	return names, nil
}

// DeleteHostVeth deletes the veth named name in the network namespace at
// hostNetns, with its other end in a pod, if there is one, and says
// whether there was. Another kind of interface of that name stays.
func DeleteHostVeth(hostNetns, name string) (bool, error) {
	return deleteHostEnd(hostNetns, name)
}

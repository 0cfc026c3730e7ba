// Command kos-cni is KOS's CNI plugin: the container runtime (or Multus)
// runs it for pods' interfaces on KOS networks, and it forwards each
// request to the node's kos-agent.
package main

import "github.com/kos-sdn/kos/components/cni"

func main() { cni.Main() }

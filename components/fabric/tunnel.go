package fabric

import (
	"fmt"

	"github.com/kos-sdn/kos/components/apis/network"
)

// DefaultTunnelPort is the UDP port of the VXLAN tunnels between nodes
// unless the NetworkConfig applies another: VXLAN's IANA port, the one
// every release before the NetworkConfig used.
const DefaultTunnelPort = network.DefaultTunnelPort

// ValidateTunnelPort returns an error when port cannot be the tunnels' UDP
// port.
func ValidateTunnelPort(port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("tunnel port %d is not in [1,65535]", port)
	}
	return nil
}

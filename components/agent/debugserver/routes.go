package debugserver

import (
	"fmt"
	"net"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// nodeRoutes returns the IPv4 routes of every table of the agent's
// network namespace (the node's: the agent runs on the host network), one
// a line, much as `ip route show table all` prints them.
func nodeRoutes() (string, error) {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return "", fmt.Errorf("listing the node's routes: %w", err)
	}
	names := map[int]string{}
	linkName := func(index int) string {
		if n, ok := names[index]; ok {
			return n
		}
		n := fmt.Sprintf("if%d", index)
		if l, err := netlink.LinkByIndex(index); err == nil {
			n = l.Attrs().Name
		}
		names[index] = n
		return n
	}
	var b strings.Builder
	for _, r := range routes {
		b.WriteString(formatRoute(r, linkName))
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// formatRoute writes a route as `ip route` does, in part: destination,
// gateway, device, source, table (unless main) and metric.
func formatRoute(r netlink.Route, linkName func(int) string) string {
	var parts []string
	switch {
	case r.Type == unix.RTN_LOCAL:
		parts = append(parts, "local", dst(r.Dst))
	case r.Type == unix.RTN_BROADCAST:
		parts = append(parts, "broadcast", dst(r.Dst))
	default:
		parts = append(parts, dst(r.Dst))
	}
	if r.Gw != nil {
		parts = append(parts, "via", r.Gw.String())
	}
	if r.LinkIndex > 0 {
		parts = append(parts, "dev", linkName(r.LinkIndex))
	}
	if r.Src != nil {
		parts = append(parts, "src", r.Src.String())
	}
	if r.Table != unix.RT_TABLE_MAIN && r.Table != 0 {
		parts = append(parts, "table", tableName(r.Table))
	}
	if r.Priority > 0 {
		parts = append(parts, "metric", fmt.Sprint(r.Priority))
	}
	return strings.Join(parts, " ")
}

func dst(n *net.IPNet) string {
	if n == nil {
		return "default"
	}
	if ones, bits := n.Mask.Size(); ones == bits {
		return n.IP.String()
	}
	return n.String()
}

func tableName(t int) string {
	switch t {
	case unix.RT_TABLE_LOCAL:
		return "local"
	case unix.RT_TABLE_DEFAULT:
		return "default"
	}
	return fmt.Sprint(t)
}

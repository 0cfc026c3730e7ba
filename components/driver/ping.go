package driver

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// The ping test of an attachment, run by its node's agent as its
// postCreateExec: a guest network namespace named after the interface
// receives the interface, which gets the attachment's address, and pings
// some attachments of the same network made ready before. Its
// postDeleteExec deletes the namespace once the agent deleted the
// interface. Both are one program (the shell, --exec-shell) with one
// script argument, so that the agent's allow-list can pin them down with
// ExecRules (see ExecAllowList).

// guestNamespacePrefix starts the name of each guest namespace.
const guestNamespacePrefix = "kosg-"

// testScript returns the ping test script of an attachment with the
// subnet's prefix length and the peers' addresses; ${ifname} and ${ipv4}
// are expanded by the agent.
func testScript(prefix int, peers []string) string {
	var b strings.Builder
	b.WriteString("set -e; ns=" + guestNamespacePrefix + "${ifname}; ip netns add $ns; ip link set ${ifname} netns $ns; ")
	b.WriteString("ip -n $ns addr add ${ipv4}/" + strconv.Itoa(prefix) + " dev ${ifname}; ip -n $ns link set ${ifname} up; ip -n $ns link set lo up")
	for _, p := range peers {
		b.WriteString("; ip netns exec $ns ping -n -q -c 2 -i 0.2 -w 10 " + p)
	}
	return b.String()
}

// cleanupScript is the postDeleteExec script of an attachment.
const cleanupScript = "ip netns del " + guestNamespacePrefix + "${ifname}"

// postCreateExec returns the ping test command of an attachment.
func postCreateExec(shell string, prefix int, peers []string) []string {
	return []string{shell, "-c", testScript(prefix, peers)}
}

// postDeleteExec returns the cleanup command of an attachment.
func postDeleteExec(shell string) []string {
	return []string{shell, "-c", cleanupScript}
}

// Patterns of what the agent expands, after expansion.
const (
	ifnamePattern = `kos[0-9a-f]{12}`
	ipv4Pattern   = `(?:[0-9]{1,3}\.){3}[0-9]{1,3}`
)

// ExecRule is one rule of an agent's exec allow-list (the agent's
// ExecRule): the program and the patterns of its arguments, each anchored.
type ExecRule struct {
	Path string   `json:"path"`
	Args []string `json:"args"`
}

// ExecAllowList returns the rules an agent's --exec-allow-file needs for the
// driver's ping tests with shell: the test script with any prefix length and
// any number of peers, and the cleanup script, expanded. Nothing else of
// the shell is allowed: every other character of each script is fixed.
func ExecAllowList(shell string) []ExecRule {
	expanded := func(script string) string {
		q := regexp.QuoteMeta(script)
		q = strings.ReplaceAll(q, regexp.QuoteMeta("${ifname}"), ifnamePattern)
		q = strings.ReplaceAll(q, regexp.QuoteMeta("${ipv4}"), ipv4Pattern)
		return q
	}
	// The test script up to its peers, with a placeholder prefix length.
	head := expanded(testScript(99, nil))
	head = strings.Replace(head, "/99 ", "/[0-9]{1,2} ", 1)
	peer := regexp.QuoteMeta("; ip netns exec $ns ping -n -q -c 2 -i 0.2 -w 10 ") + ipv4Pattern
	return []ExecRule{
		{Path: shell, Args: []string{"-c", fmt.Sprintf("%s(?:%s)*", head, peer)}},
		{Path: shell, Args: []string{"-c", expanded(cleanupScript)}},
	}
}

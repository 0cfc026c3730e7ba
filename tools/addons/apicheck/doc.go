// Package apicheck holds the tests that check the KOS addon bundle against
// real kube-apiservers of the oldest and newest minors the releases'
// kubernetesVersion ranges claim: 1.37 (tools/kube), 1.30 (tools/kube130)
// and 1.29 (tools/kube129), and the 1.38 beta (tools/kube138) once a range
// reaches it; only the minors some range claims at an end start. Every manifest of every release passes a
// server-side dry-run apply on each server its range contains, and the
// oldest and newest minor each range claims must be among the servers;
// channels picks on each server the variant meant for it; and each
// component's ServiceAccount may do what the component does and nothing
// else, by the server's own RBAC authorizer.
// Tests that need no server check what the servers cannot: image tags, that
// the kos-pki Roles grant what components/pki says kos-pki needs, and that
// the alternative releases of addons/local-channel.yaml grant what the
// bootstrap channel's do.
//
// The package has no code of its own beyond its tests.
package apicheck

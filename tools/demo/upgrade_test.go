package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/tools/kosinstall"
)

func TestProgressLine(t *testing.T) {
	got := progressLine(65*time.Second+400*time.Millisecond, []pairStats{
		{from: "a", to: "b", stats: kosinstall.PingStats{Sent: 630, Received: 630, LongestGap: 100 * time.Millisecond}},
		{from: "b", to: "a", stats: kosinstall.PingStats{Sent: 630, Received: 628, Lost: 2, LongestGap: 440 * time.Millisecond}},
	})
	want := "    ping 1:05  a>b 630/630 b>a 628/630  lost 2  longest gap 0.4s"
	if got != want {
		t.Errorf("progressLine:\ngot  %q\nwant %q", got, want)
	}
}

func TestCompareObjects(t *testing.T) {
	a := attachmentState{uid: "u-a", node: "n1", ipv4: "10.78.0.2", mac: "06:00:00:00:00:02", ifcName: "kos1", hostIP: "192.168.250.2"}
	before := objects{
		subnets:     map[string]string{"blue": "u-blue"},
		attachments: map[string]attachmentState{"guest-a": a, "guest-b": {uid: "u-b"}},
	}
	moved := a
	moved.ipv4 = "10.78.0.3"
	for _, tc := range []struct {
		name  string
		after objects
		want  []string
	}{
		{"kept, and a new attachment", objects{
			subnets:     map[string]string{"blue": "u-blue"},
			attachments: map[string]attachmentState{"guest-a": a, "guest-b": {uid: "u-b"}, "guest-c": {uid: "u-c"}},
		}, nil},
		{"lost, replaced and changed", objects{
			subnets:     map[string]string{"blue": "u-blue-2"},
			attachments: map[string]attachmentState{"guest-a": moved},
		}, []string{
			"subnet blue replaced by another object (UID u-blue-2, was u-blue)",
			"attachment guest-a changed: {uid:u-a node:n1 ipv4:10.78.0.3 mac:06:00:00:00:00:02 ifcName:kos1 hostIP:192.168.250.2}, was {uid:u-a node:n1 ipv4:10.78.0.2 mac:06:00:00:00:00:02 ifcName:kos1 hostIP:192.168.250.2}",
			"attachment guest-b lost",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := compareObjects(before, tc.after)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("compareObjects (-want +got):\n%s", diff)
			}
		})
	}
}

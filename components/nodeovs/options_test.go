package nodeovs

import (
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(*Options)
		want   []string // substrings of the error; none means valid
	}{
		{name: "defaults", modify: func(*Options) {}},
		{name: "userspace underlay", modify: func(o *Options) {
			o.UnderlayAddress, o.DatapathType = "192.168.1.2", "netdev"
		}},
		{name: "underlay on the kernel datapath", modify: func(o *Options) {
			o.UnderlayAddress = "192.168.1.2"
		}, want: []string{"--underlay-address needs --datapath-type=netdev"}},
		{name: "no flow-restore-wait", modify: func(o *Options) { o.FlowRestoreWait = 0 }},
		{name: "negative flow-restore-wait", modify: func(o *Options) { o.FlowRestoreWait = -time.Second },
			want: []string{"--flow-restore-wait -1s"}},
		{name: "every problem at once", modify: func(o *Options) {
			o.UnderlayAddress, o.DatapathType, o.UnderlayBridge = "fd00::1", "netdev", ""
			o.RunDir, o.StopTimeout = "", -time.Second
		}, want: []string{`--underlay-address "fd00::1": want an IPv4 address`, "--underlay-bridge: required", "--run-dir: required", "--stop-timeout -1s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			tc.modify(o)
			err := o.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: nil, want errors %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: %v\nwant it to say %q", err, w)
				}
			}
		})
	}
}

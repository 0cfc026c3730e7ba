package api

import "testing"

func TestTraceRequestValidate(t *testing.T) {
	t.Parallel()
	ok := TraceRequest{Namespace: "ns", Name: "a1", To: "10.0.0.9"}
	tests := []struct {
		name    string
		change  func(*TraceRequest)
		wantErr bool
	}{
		{"icmp by default", func(*TraceRequest) {}, false},
		{"tcp with a port", func(r *TraceRequest) { r.Protocol, r.Port = ProtocolTCP, 443 }, false},
		{"udp with a port", func(r *TraceRequest) { r.Protocol, r.Port = ProtocolUDP, 53 }, false},
		{"arp", func(r *TraceRequest) { r.Protocol = ProtocolARP }, false},
		{"tcp without a port", func(r *TraceRequest) { r.Protocol = ProtocolTCP }, true},
		{"udp port too high", func(r *TraceRequest) { r.Protocol, r.Port = ProtocolUDP, 65536 }, true},
		{"icmp with a port", func(r *TraceRequest) { r.Port = 80 }, true},
		{"unknown protocol", func(r *TraceRequest) { r.Protocol = "sctp" }, true},
		{"flow text in the protocol", func(r *TraceRequest) { r.Protocol = "icmp,in_port=1" }, true},
		{"no namespace", func(r *TraceRequest) { r.Namespace = "" }, true},
		{"bad name", func(r *TraceRequest) { r.Name = "a1;reboot" }, true},
		{"IPv6", func(r *TraceRequest) { r.To = "fd00::1" }, true},
		{"IPv4 in IPv6", func(r *TraceRequest) { r.To = "::ffff:10.0.0.9" }, true},
		{"host name", func(r *TraceRequest) { r.To = "example.com" }, true},
		{"flow text in the address", func(r *TraceRequest) { r.To = "10.0.0.9,actions=drop" }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := ok
			tt.change(&r)
			if err := r.Validate(); (err != nil) != tt.wantErr {
				t.Errorf("Validate(%+v) = %v, want error %t", r, err, tt.wantErr)
			}
		})
	}
}

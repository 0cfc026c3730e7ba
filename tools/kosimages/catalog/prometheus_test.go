package catalog

import (
	"strings"
	"testing"
)

func TestPrometheusVersion(t *testing.T) {
	tests := []struct {
		name, out string
		want      string
		wantErr   string
	}{
		{
			name: "Debian's",
			out:  "prometheus, version 2.42.0+ds (branch: debian/sid, revision: 2.42.0+ds-5+deb12u1)\n  build user:       team+pkg-go@tracker.debian.org\n",
			want: "2.42.0",
		},
		{
			name: "upstream's",
			out:  "prometheus, version 2.53.3 (branch: HEAD, revision: 1491d29fb1d6a3ef3f6d7d5b6b4fc0cdc4b5d6a1)\n",
			want: "2.53.3",
		},
		{
			name: "a release candidate",
			out:  "prometheus, version 3.0.0-rc.1 (branch: HEAD, revision: 0)\n",
			want: "3.0.0-rc.1",
		},
		{
			name:    "something else",
			out:     "promtool, version 2.42.0+ds\n",
			wantErr: "names no version",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PrometheusVersion(tt.out)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %q, %v; want an error saying %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

package channel

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/go-cmp/cmp"

	"github.com/kos-sdn/kos/tools/testenv"
)

func TestResolveLocation(t *testing.T) {
	tests := []struct {
		base, ref string
		want      string
	}{
		{"https://h/a/b/channel.yaml", "m.yaml", "https://h/a/b/m.yaml"},
		{"https://h/a/b/channel.yaml", "./x/m.yaml", "https://h/a/b/x/m.yaml"},
		{"https://h/a/b/channel.yaml", "../m.yaml", "https://h/a/m.yaml"},
		{"https://h/a/b/channel.yaml", "../../../m.yaml", "https://h/m.yaml"},
		{"https://h/a/b/channel.yaml", "/m.yaml", "https://h/m.yaml"},
		{"https://h:8443/a/channel.yaml?x=1", "m.yaml", "https://h:8443/a/m.yaml"},
		{"https://h/a/channel.yaml", "kops-controller.addons.k8s.io/k8s-1.16.yaml", "https://h/a/kops-controller.addons.k8s.io/k8s-1.16.yaml"},
		{"https://h/a/channel.yaml", "a:b.yaml", "https://h/a/a:b.yaml"},
		{"https://h/a/channel.yaml", "s3://other/m.yaml", "s3://other/m.yaml"},
		{"s3://bucket/kos/channels/stable.yaml", "../manifests/m.yaml", "s3://bucket/kos/manifests/m.yaml"},
		{"s3://bucket/stable.yaml", "m.yaml", "s3://bucket/m.yaml"},
		{"file:///srv/channels/stable.yaml", "../m.yaml", "file:///srv/m.yaml"},
		{"/srv/channels/stable.yaml", "../m.yaml", "/srv/m.yaml"},
		{"/srv/channels/stable.yaml", "/abs/m.yaml", "/abs/m.yaml"},
		{"channels/stable.yaml", "x/m.yaml", "channels/x/m.yaml"},
		{"stable.yaml", "m.yaml", "m.yaml"},
		{"channels/stable.yaml", "https://h/m.yaml", "https://h/m.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.base+"+"+tt.ref, func(t *testing.T) {
			got, err := ResolveLocation(tt.base, tt.ref)
			if err != nil {
				t.Fatalf("ResolveLocation: %v", err)
			}
			if got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// checkError fails unless err is one line holding every part of want.
func checkError(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one holding %q", want)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		t.Errorf("error spans several lines: %q", msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not hold %q", msg, w)
		}
	}
}

func TestFetchErrors(t *testing.T) {
	// Credentials, so that an S3 request gets as far as connecting.
	t.Setenv("AWS_ACCESS_KEY_ID", "AKID")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_REGION", "us-east-1")
	closed := closedPort(t)
	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	denied := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusForbidden)
	}))
	defer denied.Close()
	huge := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(strings.Repeat("x", 2048)))
	}))
	defer huge.Close()

	tests := []struct {
		name     string
		location string
		want     []string
	}{
		{"unreachable host", "https://" + closed + "/channel.yaml", []string{closed, "cannot connect", "check the address", "connection refused"}},
		{"unreachable S3 endpoint", "s3://bucket/channel.yaml", []string{"s3://bucket/channel.yaml", "cannot connect", "connection refused"}},
		{"HTTP 404", notFound.URL + "/channel.yaml", []string{notFound.URL + "/channel.yaml", "not found (HTTP 404 Not Found)", "check the location"}},
		{"HTTP 403", denied.URL + "/channel.yaml", []string{"access denied (HTTP 403 Forbidden)"}},
		{"too large", huge.URL + "/channel.yaml", []string{"larger than the limit of 1024 bytes"}},
		{"no such file", filepath.Join("testdata", "nope.yaml"), []string{"testdata/nope.yaml", "cannot read; check the path", "no such file"}},
		{"directory", "testdata", []string{"is a directory"}},
		{"malformed URL", "https://[::1/channel.yaml", []string{`malformed location "https://[::1/channel.yaml"`, "missing ']'"}},
		{"URL without host", "https:///channel.yaml", []string{"no host"}},
		{"S3 URL without key", "s3://bucket", []string{"use s3://BUCKET/KEY"}},
		{"S3 URL without bucket", "s3:///key.yaml", []string{"use s3://BUCKET/KEY"}},
		{"file URL with a host", "file://host/channel.yaml", []string{"file:///ABSOLUTE/PATH"}},
		{"unsupported scheme", "ftp://host/channel.yaml", []string{`unsupported location scheme "ftp"`, "https://"}},
		{"empty", "", []string{"empty location"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &Fetcher{S3Endpoint: "http://" + closed, MaxBytes: 1024}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := f.Fetch(ctx, tt.location)
			checkError(t, err, tt.want...)
		})
	}
}

func TestFetchS3WithoutCredentials(t *testing.T) {
	for _, env := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"} {
		t.Setenv(env, "")
	}
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	f := &Fetcher{S3Endpoint: "http://" + closedPort(t)}
	_, err := f.Fetch(context.Background(), "s3://bucket/channel.yaml")
	checkError(t, err, "s3://bucket/channel.yaml", "no usable AWS credentials", "AWS_ACCESS_KEY_ID")
}

func TestLoadTreeFromFiles(t *testing.T) {
	channel := filepath.Join("testdata", "tree", "channels", "stable", "channel.yaml")
	checkTree(t, NewFetcher(), channel, filepath.Join("testdata", "tree")+"/", map[string]string{
		"alpha.example.com": filepath.Join("testdata", "tree", "channels", "stable", "alpha", "v1.0.0.yaml"),
		"beta.example.com":  filepath.Join("testdata", "tree", "manifests", "beta", "v2.0.0.yaml"),
		"gamma.example.com": filepath.Join("testdata", "tree", "channels", "stable", "gamma.yaml"),
	})
}

// checkTree loads the channel of testdata/tree from location and checks that
// each release's manifest resolved to want[name], and that fetching it passes
// its hash check and yields the file of testdata/tree whose path follows root
// in the manifest's location.
func checkTree(t *testing.T, f *Fetcher, location, root string, want map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addons, err := Load(ctx, f, location)
	if err != nil {
		t.Fatalf("Load(%s): %v", location, err)
	}
	got := map[string]string{}
	for _, a := range addons {
		got[a.Name] = a.Manifest
		if a.Channel != location {
			t.Errorf("%s: channel %s, want %s", a.Name, a.Channel, location)
		}
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Fatalf("manifest locations (-got +want):\n%s", diff)
	}
	for _, a := range addons {
		data, err := f.FetchManifest(ctx, a)
		if err != nil {
			t.Errorf("FetchManifest(%s): %v", a.Name, err)
			continue
		}
		file, err := os.ReadFile(filepath.Join("testdata", "tree", strings.TrimPrefix(a.Manifest, root)))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(data), string(file)); diff != "" {
			t.Errorf("manifest of %s (-got +want):\n%s", a.Name, diff)
		}
	}
}

func TestIntegrationHTTPS(t *testing.T) {
	// The tree is served below /tree/ so that "../../" stays inside it.
	srv := httptest.NewTLSServer(http.StripPrefix("/tree", http.FileServer(http.Dir(filepath.Join("testdata", "tree")))))
	defer srv.Close()

	location := srv.URL + "/tree/channels/stable/channel.yaml"
	checkTree(t, &Fetcher{HTTPClient: srv.Client()}, location, srv.URL+"/tree/", map[string]string{
		"alpha.example.com": srv.URL + "/tree/channels/stable/alpha/v1.0.0.yaml",
		"beta.example.com":  srv.URL + "/tree/manifests/beta/v2.0.0.yaml",
		"gamma.example.com": srv.URL + "/tree/channels/stable/gamma.yaml",
	})

	t.Run("untrusted certificate", func(t *testing.T) {
		_, err := Load(context.Background(), NewFetcher(), location)
		checkError(t, err, location, "certificate is not trusted")
	})
	t.Run("missing channel", func(t *testing.T) {
		_, err := Load(context.Background(), &Fetcher{HTTPClient: srv.Client()}, srv.URL+"/tree/channels/none.yaml")
		checkError(t, err, "reading channel", srv.URL+"/tree/channels/none.yaml", "HTTP 404")
	})
}

func TestIntegrationS3(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	srv, err := testenv.StartS3(ctx, t.TempDir())
	if err != nil {
		t.Fatalf("starting the S3 server: %v", err)
	}
	defer srv.Stop()

	const bucket = "kos-state"
	if err := srv.CreateBucket(ctx, bucket); err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join("testdata", "tree")
	err = filepath.WalkDir(tree, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(tree, path)
		return srv.Put(ctx, bucket, "kos/"+filepath.ToSlash(rel), data)
	})
	if err != nil {
		t.Fatalf("uploading %s: %v", tree, err)
	}

	// The way a user points the tool at an S3-compatible store, with the
	// default credential chain reading the environment only.
	t.Setenv("S3_ENDPOINT", srv.Endpoint)
	t.Setenv("AWS_REGION", srv.Region)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")

	location := "s3://" + bucket + "/kos/channels/stable/channel.yaml"
	checkTree(t, NewFetcher(), location, "s3://"+bucket+"/kos/", map[string]string{
		"alpha.example.com": "s3://" + bucket + "/kos/channels/stable/alpha/v1.0.0.yaml",
		"beta.example.com":  "s3://" + bucket + "/kos/manifests/beta/v2.0.0.yaml",
		"gamma.example.com": "s3://" + bucket + "/kos/channels/stable/gamma.yaml",
	})

	t.Run("hash mismatch refused", func(t *testing.T) {
		f := NewFetcher()
		addons, err := Load(ctx, f, location)
		if err != nil {
			t.Fatal(err)
		}
		alpha := addons[0]
		tampered := []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: tampered\n")
		if err := srv.Put(ctx, bucket, "kos/channels/stable/alpha/v1.0.0.yaml", tampered); err != nil {
			t.Fatal(err)
		}
		data, err := f.FetchManifest(ctx, alpha)
		if data != nil {
			t.Errorf("got %d bytes of a manifest that fails its hash, want none", len(data))
		}
		checkError(t, err, alpha.ManifestHash, HashManifest(tampered), `addon "alpha.example.com"`, "refusing to apply")
	})
	t.Run("no such key", func(t *testing.T) {
		_, err := NewFetcher().Fetch(ctx, "s3://"+bucket+"/kos/none.yaml")
		checkError(t, err, "s3://"+bucket+"/kos/none.yaml", "no such key")
	})
	t.Run("no such bucket", func(t *testing.T) {
		_, err := NewFetcher().Fetch(ctx, "s3://no-bucket/kos/channel.yaml")
		checkError(t, err, "no such bucket")
	})
	t.Run("wrong credentials", func(t *testing.T) {
		t.Setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
		_, err := NewFetcher().Fetch(ctx, location)
		checkError(t, err, "credentials refused")
	})
}

func TestDiscoverRegion(t *testing.T) {
	tests := []struct {
		name   string
		status int
		region string
		want   string
	}{
		{"redirect names the region", http.StatusMovedPermanently, "eu-west-3", "eu-west-3"},
		{"refusal names the region", http.StatusForbidden, "ap-south-1", "ap-south-1"},
		{"success names the region", http.StatusOK, "us-west-2", "us-west-2"},
		{"no region said", http.StatusInternalServerError, "", "us-east-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var sawAuth bool
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				sawAuth = sawAuth || r.Header.Get("Authorization") != ""
				if tt.region != "" {
					w.Header().Set("X-Amz-Bucket-Region", tt.region)
				}
				w.WriteHeader(tt.status)
			}))
			defer srv.Close()
			client := s3.New(s3.Options{
				BaseEndpoint:     aws.String(srv.URL),
				UsePathStyle:     true,
				Region:           "us-east-1",
				Credentials:      aws.NewCredentialsCache(staticCredentials{}),
				RetryMaxAttempts: 1,
			})
			got := (&Fetcher{}).discoverRegion(context.Background(), "bucket", client)
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if sawAuth {
				t.Errorf("the region lookup was signed; it must be anonymous")
			}
		})
	}
}

type staticCredentials struct{}

func (staticCredentials) Retrieve(context.Context) (aws.Credentials, error) {
	return aws.Credentials{AccessKeyID: "AKID", SecretAccessKey: "secret"}, nil
}

// TestFetchRetries checks that an http(s):// fetch tries again after 5xx
// answers and connections cut short, and gives up once RetryTimeout would
// pass.
func TestFetchRetries(t *testing.T) {
	t.Parallel()
	var tries atomic.Int32
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		switch tries.Add(1) {
		case 1:
			http.Error(w, "busy", http.StatusServiceUnavailable)
		case 2:
			// Cut the connection short: no answer at all.
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		case 3:
			http.Error(w, "bad gateway", http.StatusBadGateway)
		default:
			w.Write([]byte("kind: ConfigMap\n"))
		}
	}))
	defer flaky.Close()
	f := &Fetcher{RetryTimeout: time.Minute}
	data, err := f.Fetch(context.Background(), flaky.URL+"/m.yaml")
	if err != nil {
		t.Fatalf("Fetch after transient failures: %v", err)
	}
	if string(data) != "kind: ConfigMap\n" || tries.Load() != 4 {
		t.Errorf("Fetch = %q after %d tries, want the content after 4", data, tries.Load())
	}

	var failing atomic.Int32
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		failing.Add(1)
		http.Error(w, "down", http.StatusInternalServerError)
	}))
	defer down.Close()
	f = &Fetcher{RetryTimeout: time.Second}
	start := time.Now()
	_, err = f.Fetch(context.Background(), down.URL+"/m.yaml")
	checkError(t, err, "HTTP 500 Internal Server Error")
	if n := failing.Load(); n < 2 {
		t.Errorf("a failing server was tried %d times, want retries", n)
	}
	// How long giving up takes follows the machine's load: a figure (0.75 s
	// on a quiet machine). A fetch that ignored RetryTimeout would retry for
	// DefaultRetryTimeout (2 min); a quarter of that is far from both.
	took := time.Since(start)
	t.Logf("figure fetch-give-up-after-1s-retry-timeout %.2f s", took.Seconds())
	if took > DefaultRetryTimeout/4 {
		t.Errorf("gave up after %s, want within about the 1s RetryTimeout", took)
	}

	var notFound atomic.Int32
	missing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		notFound.Add(1)
		http.NotFound(w, r)
	}))
	defer missing.Close()
	_, err = f.Fetch(context.Background(), missing.URL+"/m.yaml")
	checkError(t, err, "not found")
	if n := notFound.Load(); n != 1 {
		t.Errorf("a 404 was tried %d times, want once", n)
	}
}

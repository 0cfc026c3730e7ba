package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/kos-sdn/kos/tools/lane"
)

// VersityGWEnv names the environment variable that points at a versitygw
// binary; when it is unset, tools/versitygw/build.sh builds one (once) and
// says where it is.
const VersityGWEnv = "KOS_VERSITYGW"

// The fixed credentials and region of every S3Server. They guard nothing: the
// server listens on loopback only and holds test data.
const (
	s3AccessKey = "kos-test-access-key"
	s3SecretKey = "kos-test-secret-key"
	s3Region    = "us-east-1"
)

// s3StartTimeout bounds how long StartS3 waits for the server to answer;
// versitygw is up in a fraction of a second.
const s3StartTimeout = 30 * time.Second

// S3Server is a running versitygw: a real S3-compatible server on a free
// 127.0.0.1 port, storing buckets as folders of a posix file system. It dies
// with the test process, and on Stop.
type S3Server struct {
	// Endpoint is the server's URL (http://127.0.0.1:PORT), for clients that
	// address it path-style.
	Endpoint string
	// AccessKey and SecretKey are the root credentials the server accepts.
	AccessKey string
	SecretKey string
	// Region is the region the server claims to be in.
	Region string

	proc   *process
	client *s3.Client
}

// StartS3 builds versitygw when needed and starts it on 127.0.0.1 with its
// posix backend in dir/buckets; its log goes to dir/versitygw.log.
func StartS3(ctx context.Context, dir string) (*S3Server, error) {
	return StartS3At(ctx, dir, netip.MustParseAddr("127.0.0.1"))
}

// StartS3At is StartS3 on host, an address of this host: one a test
// cluster's pods reach (a node's HostIP), for a Job that writes to S3.
func StartS3At(ctx context.Context, dir string, host netip.Addr) (*S3Server, error) {
	if err := lane.Require(lane.Integration, "S3 server"); err != nil {
		return nil, err
	}
	binary, err := findVersityGW(ctx)
	if err != nil {
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", dir, err)
	}
	backend := filepath.Join(dir, "buckets")
	if err := os.MkdirAll(backend, 0o755); err != nil {
		return nil, fmt.Errorf("creating the S3 backend folder: %w", err)
	}
	var ps ports
	// A port found free may be taken before versitygw binds it: try another.
	for attempt := 1; ; attempt++ {
		port, err := ps.pick(0)
		if err != nil {
			return nil, err
		}
		s, err := startS3(ctx, dir, binary, backend, netip.AddrPortFrom(host, uint16(port)))
		if err == nil {
			return s, nil
		}
		if attempt == 3 || s == nil || !portTaken(s.proc) {
			return nil, err
		}
	}
}

// startS3 starts versitygw at the address and waits until it answers. On failure it
// returns the server too, stopped, so that the caller can tell why.
func startS3(ctx context.Context, dir, binary, backend string, at netip.AddrPort) (*S3Server, error) {
	addr := at.String()
	args := []string{
		"--port", addr,
		"--access", s3AccessKey,
		"--secret", s3SecretKey,
		"--region", s3Region,
		"--quiet",
		"posix", backend,
	}
	proc, err := startProcess(dir, "versitygw", binary, args, false)
	if err != nil {
		return nil, err
	}
	s := &S3Server{
		Endpoint:  "http://" + addr,
		AccessKey: s3AccessKey,
		SecretKey: s3SecretKey,
		Region:    s3Region,
		proc:      proc,
	}
	if err := proc.WaitReady(ctx, s3StartTimeout, s.answers); err != nil {
		_ = proc.Stop(0)
		return s, err
	}
	s.client = s3.New(s3.Options{
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Region:       s.Region,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
	})
	return s, nil
}

// answers reports whether the server answers HTTP at all: an anonymous
// request is refused, which is enough to know it serves.
func (s *S3Server) answers(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Endpoint+"/", nil)
	if err != nil {
		return fmt.Errorf("building the readiness request: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// CreateBucket creates a bucket.
func (s *S3Server) CreateBucket(ctx context.Context, name string) error {
	if _, err := s.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		return fmt.Errorf("creating bucket %s: %w", name, err)
	}
	return nil
}

// Put stores data under key in bucket.
func (s *S3Server) Put(ctx context.Context, bucket, key string, data []byte) error {
	// A seekable body: over plain http the SDK reads it twice, to sign it.
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(bucket),
		Key:    aws.String(key),
		Body:   bytes.NewReader(data),
	})
	if err != nil {
		return fmt.Errorf("putting s3://%s/%s: %w", bucket, key, err)
	}
	return nil
}

// Stop stops the server; the buckets stay in its folder.
func (s *S3Server) Stop() error {
	return s.proc.Stop(5 * time.Second)
}

// findVersityGW returns the versitygw binary: $KOS_VERSITYGW, else the one
// tools/versitygw/build.sh builds. The build's progress goes to stderr so
// that a cold first build, which takes a minute or more, is not silent.
func findVersityGW(ctx context.Context) (string, error) {
	if binary := os.Getenv(VersityGWEnv); binary != "" {
		return filepath.Abs(binary)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", fmt.Errorf("locating tools/versitygw/build.sh (or set %s): %w", VersityGWEnv, err)
	}
	script := filepath.Join(root, "tools", "versitygw", "build.sh")
	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Stdout = &stdout
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building versitygw with %s: %w", script, err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	binary := filepath.Join(strings.TrimSpace(lines[len(lines)-1]), "versitygw")
	info, err := os.Stat(binary)
	if err != nil {
		return "", fmt.Errorf("%s printed no folder holding versitygw: %w", script, err)
	}
	if info.IsDir() || info.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not an executable file", binary)
	}
	return binary, nil
}

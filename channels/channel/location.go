package channel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"k8s.io/klog/v2"
)

// S3EndpointEnv names the environment variable that points s3:// locations at
// an S3-compatible store (MinIO, versitygw, ...) instead of AWS. Such a store
// is addressed path-style, in the region AWS_REGION names (us-east-1 when
// unset), and bucket regions are not looked up.
const S3EndpointEnv = "S3_ENDPOINT"

// DefaultMaxFetchBytes bounds what Fetch reads from one location. Channels and
// manifests are text; anything larger is a wrong location, and reading it
// whole would only exhaust memory.
const DefaultMaxFetchBytes = 64 << 20

// defaultS3Region is where buckets are looked up first, and the region of an
// S3-compatible store when AWS_REGION is unset.
const defaultS3Region = "us-east-1"

// Fetcher reads locations: bare paths and file://, http(s):// and
// s3://bucket/key URLs. It is safe for concurrent use.
type Fetcher struct {
	// HTTPClient fetches http(s):// locations and carries S3 requests; nil
	// means a client with connect, TLS and response-header timeouts.
	HTTPClient *http.Client
	// S3Endpoint, when set, selects an S3-compatible store at that URL with
	// path-style addressing. NewFetcher fills it from S3_ENDPOINT.
	S3Endpoint string
	// MaxBytes bounds the size of one location's content; 0 means
	// DefaultMaxFetchBytes.
	MaxBytes int64
	// RetryTimeout bounds the time one http(s):// fetch may take, retries
	// included: a 5xx or 429 answer, or a connection reset or cut short, is
	// tried again with exponential backoff until it passes; 0
	// means DefaultRetryTimeout.
	RetryTimeout time.Duration
	// Warn, when set, is told about channel entries Load skips (such as one
	// whose kubernetesVersion does not parse); nil logs them.
	Warn func(string)

	mu           sync.Mutex
	defaultHTTP  *http.Client
	awsConfig    *aws.Config
	s3Clients    map[string]*s3.Client // by region
	bucketRegion map[string]string
}

// NewFetcher returns a Fetcher with a default HTTP client, the default AWS
// credential chain, and S3Endpoint taken from S3_ENDPOINT.
func NewFetcher() *Fetcher {
	return &Fetcher{S3Endpoint: os.Getenv(S3EndpointEnv)}
}

// locationHelp lists the location forms, for errors about malformed ones.
const locationHelp = "use a path, file:///PATH, https://HOST/PATH or s3://BUCKET/KEY"

// parseLocation checks a location and returns it as a URL; a bare path comes
// back as a URL with an empty scheme and the path as given.
func parseLocation(location string) (*url.URL, error) {
	if strings.TrimSpace(location) == "" {
		return nil, fmt.Errorf("empty location; %s", locationHelp)
	}
	if !isURL(location) {
		return &url.URL{Path: location}, nil
	}
	u, err := url.Parse(location)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("malformed location %q (%s): %w", location, locationHelp, err)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("malformed location %q: a file URL names no host; use file:///ABSOLUTE/PATH", location)
		}
		if u.Path == "" {
			return nil, fmt.Errorf("malformed location %q: no path; use file:///ABSOLUTE/PATH", location)
		}
	case "http", "https":
		if u.Host == "" {
			return nil, fmt.Errorf("malformed location %q: no host; use %s://HOST/PATH", location, u.Scheme)
		}
	case "s3":
		if u.Host == "" || strings.TrimPrefix(u.Path, "/") == "" {
			return nil, fmt.Errorf("malformed location %q: use s3://BUCKET/KEY", location)
		}
	default:
		return nil, fmt.Errorf("unsupported location scheme %q in %q; %s", u.Scheme, location, locationHelp)
	}
	return u, nil
}

// isURL tells URLs from bare paths: a URL has "://" after its scheme, or is
// a file: URL. Everything else is a path, even with a colon in it.
func isURL(location string) bool {
	if strings.HasPrefix(strings.ToLower(location), "file:") {
		return true
	}
	scheme, _, ok := strings.Cut(location, "://")
	return ok && scheme != "" && !strings.ContainsAny(scheme, "/?#")
}

// ResolveLocation resolves ref relative to base, as a manifest named in a
// channel is resolved against the channel's location: an absolute URL or
// path stands alone, and a relative one is resolved by standard URL
// resolution (RFC 3986) against a URL base, or joined to the folder of a path
// base.
func ResolveLocation(base, ref string) (string, error) {
	if strings.TrimSpace(ref) == "" {
		return "", errors.New("empty location")
	}
	if isURL(ref) {
		if _, err := parseLocation(ref); err != nil {
			return "", err
		}
		return ref, nil
	}
	b, err := parseLocation(base)
	if err != nil {
		return "", err
	}
	if b.Scheme == "" {
		if filepath.IsAbs(ref) {
			return filepath.Clean(ref), nil
		}
		return filepath.Join(filepath.Dir(b.Path), ref), nil
	}
	// A colon in the first segment would make url.Parse read a scheme; "./"
	// keeps the segment a path, as RFC 3986 §4.2 advises.
	if i := strings.IndexAny(ref, ":/"); i >= 0 && ref[i] == ':' {
		ref = "./" + ref
	}
	r, err := url.Parse(ref)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", fmt.Errorf("malformed relative location %q: %w", ref, err)
	}
	got := b.ResolveReference(r).String()
	// A reference can climb to what names no file, such as "." against
	// s3://bucket/key, which gives the bucket itself.
	if _, err := parseLocation(got); err != nil {
		return "", fmt.Errorf("%q relative to %s gives %s, which names no file: %w", ref, base, got, err)
	}
	return got, nil
}

// Fetch returns the content at location. Its errors are one line, name the
// location, and say what to check.
func (f *Fetcher) Fetch(ctx context.Context, location string) ([]byte, error) {
	u, err := parseLocation(location)
	if err != nil {
		return nil, err
	}
	var data []byte
	switch u.Scheme {
	case "", "file":
		data, err = f.readFile(location, u.Path)
	case "http", "https":
		data, err = f.fetchHTTP(ctx, location, u)
	case "s3":
		data, err = f.fetchS3(ctx, location, u.Host, strings.TrimPrefix(u.Path, "/"))
	}
	if err != nil {
		return nil, oneLineError{err}
	}
	klog.V(4).InfoS("Fetched location", "location", location, "bytes", len(data))
	return data, nil
}

func (f *Fetcher) maxBytes() int64 {
	if f.MaxBytes > 0 {
		return f.MaxBytes
	}
	return DefaultMaxFetchBytes
}

// readAll reads r up to the size limit.
func (f *Fetcher) readAll(location string, r io.Reader) ([]byte, error) {
	limit := f.maxBytes()
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%s: reading failed; try again: %w", location, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: larger than the limit of %d bytes; check that it is a channel or a manifest", location, limit)
	}
	return data, nil
}

func (f *Fetcher) readFile(location, path string) ([]byte, error) {
	file, err := os.Open(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("%s: cannot read; check the path: %w", location, err)
	}
	defer file.Close()
	if info, err := file.Stat(); err == nil && info.IsDir() {
		return nil, fmt.Errorf("%s: is a directory; name a channel or manifest file", location)
	}
	return f.readAll(location, file)
}

// httpClient returns the configured client or, made once, the default one.
func (f *Fetcher) httpClient() *http.Client {
	if f.HTTPClient != nil {
		return f.HTTPClient
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.defaultHTTP == nil {
		transport := http.DefaultTransport.(*http.Transport).Clone()
		transport.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		transport.TLSHandshakeTimeout = 10 * time.Second
		transport.ResponseHeaderTimeout = 30 * time.Second
		f.defaultHTTP = &http.Client{Transport: transport, Timeout: 5 * time.Minute}
	}
	return f.defaultHTTP
}

// DefaultRetryTimeout bounds one http(s):// fetch, retries included.
const DefaultRetryTimeout = 2 * time.Minute

// The backoff between tries of an http(s):// fetch.
const (
	firstRetryDelay = 250 * time.Millisecond
	maxRetryDelay   = 8 * time.Second
)

// fetchHTTP fetches an http(s):// location, trying again with exponential
// backoff while the failure is one a later try may not meet (a 5xx or 429
// answer, a connection reset or cut short), until RetryTimeout
// would pass.
func (f *Fetcher) fetchHTTP(ctx context.Context, location string, u *url.URL) ([]byte, error) {
	total := f.RetryTimeout
	if total <= 0 {
		total = DefaultRetryTimeout
	}
	deadline := time.Now().Add(total)
	delay := firstRetryDelay
	for try := 1; ; try++ {
		data, retry, err := f.fetchHTTPOnce(ctx, location, u)
		if err == nil || !retry || time.Now().Add(delay).After(deadline) {
			return data, err
		}
		klog.V(2).InfoS("Fetch failed, retrying", "location", location, "try", try, "delay", delay, "err", err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(delay):
		}
		delay = min(2*delay, maxRetryDelay)
	}
}

// fetchHTTPOnce makes one try, and says whether another may succeed.
func (f *Fetcher) fetchHTTPOnce(ctx context.Context, location string, u *url.URL) ([]byte, bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, false, fmt.Errorf("malformed location %q: %w", location, err)
	}
	resp, err := f.httpClient().Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, transient(err), fmt.Errorf("%s: %s: %w", location, connectHint(err), err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
		data, err := f.readAll(location, resp.Body)
		return data, err != nil && transient(err), err
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		return nil, false, fmt.Errorf("%s: not found (HTTP %s); check the location", location, resp.Status)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, false, fmt.Errorf("%s: access denied (HTTP %s); check the URL and that it is readable without credentials", location, resp.Status)
	default:
		retry := resp.StatusCode >= 500 && resp.StatusCode != http.StatusNotImplemented || resp.StatusCode == http.StatusTooManyRequests
		return nil, retry, fmt.Errorf("%s: the server answered HTTP %s; check the location and the server", location, resp.Status)
	}
}

// transient reports whether a request failed in a way a later try may not:
// the connection was reset or cut short.
func transient(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE)
}

// connectHint says, for a failed request, what to check.
func connectHint(err error) string {
	var dnsErr *net.DNSError
	var verifyErr *tls.CertificateVerificationError
	var certErr x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalidErr x509.CertificateInvalidError
	var netErr net.Error
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return "interrupted"
	case errors.As(err, &dnsErr):
		return "unknown host; check the host name and DNS"
	case errors.As(err, &verifyErr) || errors.As(err, &certErr) || errors.As(err, &hostErr) || errors.As(err, &invalidErr):
		return "the server's certificate is not trusted; check the URL or trust the server's CA"
	case errors.As(err, &netErr) && netErr.Timeout():
		return "timed out; check the address and the network"
	default:
		return "cannot connect; check the address and that the server is up"
	}
}

// s3Client returns a client for bucket: the S3-compatible store's when
// S3Endpoint is set, else one in the bucket's region.
func (f *Fetcher) s3Client(ctx context.Context, bucket string) (*s3.Client, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.awsConfig == nil {
		cfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, fmt.Errorf("loading the AWS configuration; check AWS_PROFILE and ~/.aws/config: %w", err)
		}
		f.awsConfig = &cfg
		f.s3Clients = map[string]*s3.Client{}
		f.bucketRegion = map[string]string{}
	}
	region := f.awsConfig.Region
	if region == "" {
		region = defaultS3Region
	}
	if f.S3Endpoint == "" {
		r, ok := f.bucketRegion[bucket]
		if !ok {
			r = f.discoverRegion(ctx, bucket, f.clientLocked(region))
			f.bucketRegion[bucket] = r
		}
		region = r
	}
	return f.clientLocked(region), nil
}

// clientLocked returns the cached client for region, making it when needed.
// f.mu must be held.
func (f *Fetcher) clientLocked(region string) *s3.Client {
	if c, ok := f.s3Clients[region]; ok {
		return c
	}
	c := s3.NewFromConfig(*f.awsConfig, func(o *s3.Options) {
		o.Region = region
		if f.HTTPClient != nil {
			o.HTTPClient = f.HTTPClient
		}
		if f.S3Endpoint != "" {
			o.BaseEndpoint = aws.String(f.S3Endpoint)
			o.UsePathStyle = true
		}
	})
	f.s3Clients[region] = c
	return c
}

// discoverRegion asks S3 where bucket lives. S3 names the region in the
// x-amz-bucket-region header of a HEAD on the bucket, even when it refuses
// the request or redirects it; the request is anonymous so that credentials
// signed for the wrong region do not get in the way. When S3 does not say,
// fallback is kept and the real request reports the problem.
func (f *Fetcher) discoverRegion(ctx context.Context, bucket string, client *s3.Client) string {
	fallback := client.Options().Region
	out, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(bucket)}, func(o *s3.Options) {
		// No credentials means an unsigned request. (aws.AnonymousCredentials
		// works only when a client is made, not per operation.)
		o.Credentials = nil
	})
	if err == nil {
		if out.BucketRegion != nil && *out.BucketRegion != "" {
			return *out.BucketRegion
		}
		return fallback
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.Response != nil {
		if region := re.Response.Header.Get("X-Amz-Bucket-Region"); region != "" {
			klog.V(2).InfoS("Found bucket region", "bucket", bucket, "region", region)
			return region
		}
	}
	klog.V(2).InfoS("Could not find bucket region; using the default", "bucket", bucket, "region", fallback, "err", err)
	return fallback
}

func (f *Fetcher) fetchS3(ctx context.Context, location, bucket, key string) ([]byte, error) {
	client, err := f.s3Client(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", location, err)
	}
	out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		// The SDK says "get identity" when no credential source worked.
		if strings.Contains(err.Error(), "get identity") {
			return nil, fmt.Errorf("%s: no usable AWS credentials; set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run with an instance role: %w", location, err)
		}
		return nil, fmt.Errorf("%s: %s: %w", location, s3Hint(err), s3Cause(err))
	}
	defer out.Body.Close()
	return f.readAll(location, out.Body)
}

// s3Hint says, for a failed S3 request, what to check.
func s3Hint(err error) string {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "NoSuchKey", "NotFound":
			return "no such key; check the key"
		case "NoSuchBucket":
			return "no such bucket; check the bucket name"
		case "AccessDenied", "Forbidden":
			return "access denied; check the credentials and the bucket policy"
		case "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken":
			return "credentials refused; check AWS_PROFILE or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
		case "PermanentRedirect", "AuthorizationHeaderMalformed":
			return "wrong region; set AWS_REGION to the bucket's region"
		}
		return "S3 refused the request"
	}
	return connectHint(err)
}

// s3Cause digs the part worth reading out of an SDK error, which otherwise
// carries the operation, attempt count, request and host ids.
func s3Cause(err error) error {
	var apiErr smithy.APIError
	var opErr *net.OpError
	switch {
	case errors.As(err, &apiErr):
		return apiErr
	case errors.As(err, &opErr):
		return opErr
	}
	return err
}

// oneLineError prints a wrapped error on one line, for the SDK errors that
// span several, and keeps the chain for errors.Is and errors.As.
type oneLineError struct{ err error }

func (e oneLineError) Error() string { return strings.Join(strings.Fields(e.err.Error()), " ") }

func (e oneLineError) Unwrap() error { return e.err }

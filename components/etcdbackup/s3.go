package etcdbackup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// defaultS3Region is the region of an S3-compatible store, and of the
// client, when AWS_REGION is unset.
const defaultS3Region = "us-east-1"

// S3 is a folder of snapshots in an S3 bucket: each snapshot and its sidecar
// are objects named Prefix + file name.
type S3 struct {
	Client *s3.Client
	Bucket string
	// Prefix is "" or ends with "/".
	Prefix string
}

// ParseS3 splits s3://BUCKET/PREFIX into its bucket and key part.
func ParseS3(location string) (bucket, key string, err error) {
	u, err := url.Parse(location)
	if err != nil || u.Scheme != "s3" || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", "", fmt.Errorf("malformed S3 location %q: use s3://BUCKET/PREFIX/", location)
	}
	return u.Host, strings.TrimPrefix(u.Path, "/"), nil
}

// NewS3 returns the store at s3://BUCKET/PREFIX (a trailing / is added to a
// prefix without one). Credentials and region come from the AWS default
// chain (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, a profile, an
// instance role). endpoint, when set, selects an S3-compatible store at that
// URL, addressed path-style, as channels does for S3_ENDPOINT.
func NewS3(ctx context.Context, location, endpoint string) (*S3, error) {
	bucket, prefix, err := ParseS3(location)
	if err != nil {
		return nil, err
	}
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if o.Region == "" {
			o.Region = defaultS3Region
		}
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
			o.UsePathStyle = true
		}
	})
	return &S3{Client: client, Bucket: bucket, Prefix: prefix}, nil
}

// URL returns the location of the object of file name.
func (s *S3) URL(name string) string { return "s3://" + s.Bucket + "/" + s.Prefix + name }

// Upload puts the snapshot and its sidecar, the sidecar first, and returns
// the snapshot's location.
func (s *S3) Upload(ctx context.Context, snap Snapshot) (string, error) {
	if err := s.put(ctx, snap.Name+SumSuffix, strings.NewReader(sumLine(snap.SHA256, snap.Name))); err != nil {
		return "", err
	}
	f, err := os.Open(snap.Path)
	if err != nil {
		return "", fmt.Errorf("uploading snapshot: %w", err)
	}
	defer f.Close()
	// A file is seekable: over plain http the SDK reads the body twice, to
	// sign it.
	if err := s.put(ctx, snap.Name, f); err != nil {
		return "", err
	}
	return s.URL(snap.Name), nil
}

func (s *S3) put(ctx context.Context, name string, body io.ReadSeeker) error {
	_, err := s.Client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.Bucket),
		Key:    aws.String(s.Prefix + name),
		Body:   body,
	})
	if err != nil {
		return fmt.Errorf("uploading %s: %w", s.URL(name), s3Cause(err))
	}
	return nil
}

// List returns the names of the snapshots under the prefix, oldest first.
func (s *S3) List(ctx context.Context) ([]string, error) {
	var names []string
	pages := s3.NewListObjectsV2Paginator(s.Client, &s3.ListObjectsV2Input{
		Bucket: aws.String(s.Bucket),
		Prefix: aws.String(s.Prefix),
	})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", s.URL(""), s3Cause(err))
		}
		for _, o := range page.Contents {
			name := strings.TrimPrefix(aws.ToString(o.Key), s.Prefix)
			if IsName(name) {
				names = append(names, name)
			}
		}
	}
	slices.Sort(names)
	return names, nil
}

// Prune deletes all but the newest keep snapshots under the prefix, with
// their sidecars, and returns the locations it deleted.
func (s *S3) Prune(ctx context.Context, keep int) ([]string, error) {
	if keep < 1 {
		return nil, fmt.Errorf("keeping %d snapshots: want at least 1", keep)
	}
	names, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, name := range Oldest(names, keep) {
		for _, obj := range []string{name + SumSuffix, name} {
			_, err := s.Client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(s.Prefix + obj)})
			if err != nil {
				return removed, fmt.Errorf("deleting %s: %w", s.URL(obj), s3Cause(err))
			}
		}
		removed = append(removed, s.URL(name))
	}
	return removed, nil
}

// Download fetches the snapshot name (the newest when name is "") and its
// sidecar into dir, and returns the snapshot's local path. The caller
// verifies it.
func (s *S3) Download(ctx context.Context, name, dir string) (string, error) {
	if name == "" {
		names, err := s.List(ctx)
		if err != nil {
			return "", err
		}
		if len(names) == 0 {
			return "", fmt.Errorf("no snapshot (%s*%s) under %s", FilePrefix, FileSuffix, s.URL(""))
		}
		name = names[len(names)-1]
	}
	path := filepath.Join(dir, name)
	if err := s.get(ctx, name, path); err != nil {
		return "", err
	}
	if err := s.get(ctx, name+SumSuffix, path+SumSuffix); err != nil {
		os.Remove(path)
		return "", err
	}
	return path, nil
}

// get writes the object of file name to path.
func (s *S3) get(ctx context.Context, name, path string) error {
	out, err := s.Client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String(s.Prefix + name)})
	if err != nil {
		return fmt.Errorf("downloading %s: %w", s.URL(name), s3Cause(err))
	}
	defer out.Body.Close()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("downloading %s: %w", s.URL(name), err)
	}
	_, err = io.Copy(f, out.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("downloading %s: %w", s.URL(name), err)
	}
	return nil
}

// s3Cause keeps the part of an SDK error worth reading (the service's code
// and message), which otherwise spans the operation, attempts and request
// ids.
func s3Cause(err error) error {
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		return apiErr
	}
	return err
}

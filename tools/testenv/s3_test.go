package testenv

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/google/go-cmp/cmp"
)

func TestIntegrationS3Server(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s, err := StartS3(ctx, t.TempDir())
	if err != nil {
		t.Fatalf("StartS3: %v", err)
	}
	defer s.Stop()

	u, err := url.Parse(s.Endpoint)
	if err != nil {
		t.Fatalf("endpoint %q: %v", s.Endpoint, err)
	}
	if got, want := u.Hostname(), "127.0.0.1"; got != want {
		t.Errorf("endpoint host: got %s, want %s", got, want)
	}
	if port, err := strconv.Atoi(u.Port()); err != nil || port <= 0 || port >= 32768 {
		t.Errorf("endpoint port %q: want a port below 32768", u.Port())
	}

	if err := s.CreateBucket(ctx, "kos"); err != nil {
		t.Fatal(err)
	}
	want := []byte("kind: Addons\n")
	if err := s.Put(ctx, "kos", "channels/stable.yaml", want); err != nil {
		t.Fatal(err)
	}

	// A client of its own, as a user of the server would make one.
	client := s3.New(s3.Options{
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Region:       s.Region,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
	})
	out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("kos"), Key: aws.String("channels/stable.yaml")})
	if err != nil {
		t.Fatalf("GetObject: %v", err)
	}
	got, err := io.ReadAll(out.Body)
	out.Body.Close()
	if err != nil {
		t.Fatalf("reading the object: %v", err)
	}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("object content (-got +want):\n%s", diff)
	}

	// Wrong credentials are refused: the server checks signatures.
	wrong := s3.New(s3.Options{
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Region:       s.Region,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, "not-the-secret", ""),
	})
	_, err = wrong.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("kos"), Key: aws.String("channels/stable.yaml")})
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "SignatureDoesNotMatch" {
		t.Errorf("GetObject with a wrong secret: got %v, want SignatureDoesNotMatch", err)
	}

	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if conn, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after Stop", u.Host)
	}
}

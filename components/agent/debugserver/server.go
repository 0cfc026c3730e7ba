package debugserver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"

	"github.com/kos-sdn/kos/components/agent/api"
)

// DefaultBindAddress is where the releases serve the endpoints.
var DefaultBindAddress = ":" + strconv.Itoa(api.DebugPort)

// Caching and timeouts of the reviews, as kubelet's defaults.
const (
	reviewTimeout = 10 * time.Second
	tokenCacheTTL = 2 * time.Minute
	allowCacheTTL = 5 * time.Minute
	denyCacheTTL  = 30 * time.Second
	// shutdownTimeout bounds how long a stopping server waits for the
	// requests in flight.
	shutdownTimeout = 5 * time.Second
)

// The ConfigMap where kube-apiserver publishes the CA of the client
// certificates it accepts, as extension API servers read it.
const (
	clientCANamespace = "kube-system"
	clientCAConfigMap = "extension-apiserver-authentication"
	clientCAKey       = "client-ca-file"
)

// Config configures the server of the debug endpoints.
type Config struct {
	// BindAddress is where to serve, such as DefaultBindAddress.
	BindAddress string
	// LoopbackOnly serves on the loopback address, at BindAddress's port,
	// without asking who calls.
	LoopbackOnly bool
	// NodeName is the agent's node, whose nodes/kos-debug a user must be
	// allowed.
	NodeName string
	// Kube is the main cluster's client, which reviews tokens and access
	// and publishes the client CA; unused with LoopbackOnly.
	Kube kubernetes.Interface
}

// Server serves the debug endpoints.
type Server struct {
	listener net.Listener
	server   *http.Server
	clientCA *dynamiccertificates.ConfigMapCAController
	loopback bool
}

// New binds the server's address at once, so that a bad or taken address
// fails before anything starts, and returns a Server of h over HTTPS, with
// a self-signed certificate made now, as kubelet's without one given. It
// lets in only the users that the main cluster authenticates and allows
// nodes/kos-debug of cfg.NodeName; loopback only, it asks no one.
func New(cfg Config, h http.Handler) (*Server, error) {
	name := cfg.NodeName
	if name == "" {
		name = "localhost"
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(name, nil, []string{name, "localhost"})
	if err != nil {
		return nil, fmt.Errorf("making the debug server's certificate: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("loading the debug server's certificate: %w", err)
	}
	// A client certificate is asked for, not required: the authenticator
	// checks it against the client CA, which may change while serving.
	tlsConfig := &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequestClientCert, MinVersion: tls.VersionTLS12}
	s := &Server{loopback: cfg.LoopbackOnly}
	addr := cfg.BindAddress
	if cfg.LoopbackOnly {
		_, port, err := net.SplitHostPort(cfg.BindAddress)
		if err != nil {
			return nil, fmt.Errorf("debug bind address %q: %w", cfg.BindAddress, err)
		}
		addr = net.JoinHostPort("127.0.0.1", port)
	} else {
		if h, err = s.checkAccess(cfg, h); err != nil {
			return nil, err
		}
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for debug requests: %w", err)
	}
	s.listener = tls.NewListener(l, tlsConfig)
	s.server = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	return s, nil
}

// checkAccess returns h behind the main cluster's delegated authentication
// and authorization, and keeps the client CA's watch for Serve to run.
func (s *Server) checkAccess(cfg Config, h http.Handler) (http.Handler, error) {
	if cfg.Kube == nil || cfg.NodeName == "" {
		return nil, errors.New("debug endpoints that check identity need the main cluster's client and the node's name")
	}
	clientCA, err := dynamiccertificates.NewDynamicCAFromConfigMapController("client-ca", clientCANamespace, clientCAConfigMap, clientCAKey, cfg.Kube)
	if err != nil {
		return nil, fmt.Errorf("reading the main cluster's client CA: %w", err)
	}
	// Retries as k8s.io/apiserver's default for delegated reviews.
	backoff := &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                          &apiserver.AnonymousAuthConfig{Enabled: false},
		TokenAccessReviewClient:            cfg.Kube.AuthenticationV1(),
		TokenAccessReviewTimeout:           reviewTimeout,
		WebhookRetryBackoff:                backoff,
		CacheTTL:                           tokenCacheTTL,
		ClientCertificateCAContentProvider: clientCA,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("configuring the authentication of debug requests: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: cfg.Kube.AuthorizationV1(),
		AllowCacheTTL:             allowCacheTTL,
		DenyCacheTTL:              denyCacheTTL,
		WebhookRetryBackoff:       backoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("configuring the authorization of debug requests: %w", err)
	}
	s.clientCA = clientCA
	return withAccessCheck(h, authn, authz, cfg.NodeName), nil
}

// Addr returns the address the server listens on.
func (s *Server) Addr() string { return s.listener.Addr().String() }

// URL returns the URL of the server's root.
func (s *Server) URL() string { return "https://" + s.Addr() }

// Serve serves until ctx ends, then shuts down gracefully, waiting up to
// five seconds for the requests in flight. It returns nil after such a
// shutdown, and the error that stopped it otherwise; either way nothing it
// started, the watch of the client CA included, runs on once it returns.
func (s *Server) Serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	defer func() {
		cancel()
		<-watched
	}()
	if s.clientCA != nil {
		go func() {
			defer close(watched)
			s.clientCA.Run(ctx, 1)
		}()
	} else {
		close(watched)
	}
	klog.FromContext(ctx).Info("Serving the debug endpoints", "address", s.URL(), "checksIdentity", !s.loopback)
	served := make(chan error, 1)
	go func() { served <- s.server.Serve(s.listener) }()
	select {
	case err := <-served:
		return fmt.Errorf("serving the debug endpoints: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer stop()
	err := s.server.Shutdown(shutdownCtx)
	if serveErr := <-served; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, serveErr)
	}
	if err != nil {
		return fmt.Errorf("shutting down the debug server: %w", err)
	}
	return nil
}

// withAccessCheck serves h to the users that authn authenticates and authz
// allows the request on nodes/kos-debug of node: 401 to anyone else without
// an identity, 403 to those without the right.
func withAccessCheck(h http.Handler, authn authenticator.Request, authz authorizer.Authorizer, node string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logger := klog.FromContext(r.Context())
		resp, ok, err := authn.AuthenticateRequest(r)
		if err != nil || !ok {
			if err != nil {
				logger.V(2).Info("Authenticating a debug request failed", "path", r.URL.Path, "err", err)
			}
			http.Error(w, "Unauthorized: the debug endpoints need a bearer token or a client certificate of the cluster", http.StatusUnauthorized)
			return
		}
		attrs := accessAttributes(resp, r, node)
		decision, reason, err := authz.Authorize(r.Context(), attrs)
		if err != nil {
			logger.V(2).Info("Authorizing a debug request failed", "user", resp.User.GetName(), "path", r.URL.Path, "err", err)
		}
		if decision != authorizer.DecisionAllow {
			msg := fmt.Sprintf("Forbidden: user %q cannot %s %s/%s of node %s", resp.User.GetName(), attrs.Verb, api.DebugResource, api.DebugSubresource, node)
			if reason != "" {
				msg += ": " + reason
			}
			http.Error(w, msg, http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// accessAttributes returns what a SubjectAccessReview of a request asks:
// get for a read, create for anything else: a trace, a probe's POST and
// DELETE.
func accessAttributes(resp *authenticator.Response, r *http.Request, node string) authorizer.AttributesRecord {
	verb := "get"
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		verb = "create"
	}
	return authorizer.AttributesRecord{
		User:            resp.User,
		Verb:            verb,
		APIVersion:      "v1",
		Resource:        api.DebugResource,
		Subresource:     api.DebugSubresource,
		Name:            node,
		ResourceRequest: true,
		Path:            r.URL.Path,
	}
}

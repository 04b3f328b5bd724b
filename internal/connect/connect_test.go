package connect

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"golang.org/x/oauth2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const testSub = "projects/p/subscriptions/sub"

func TestResolveEndpoint(t *testing.T) {
	t.Setenv(EmulatorHostEnv, "")
	if r := (Options{}).resolve(); r.target != DefaultEndpoint || r.insecure {
		t.Fatalf("default: got %+v, want TLS to %s", r, DefaultEndpoint)
	}
	t.Setenv(EmulatorHostEnv, "localhost:8085")
	if r := (Options{}).resolve(); r.target != "localhost:8085" || !r.insecure {
		t.Fatalf("emulator: got %+v, want plaintext to localhost:8085", r)
	}
	// An explicit endpoint wins over the emulator and keeps its own security.
	if r := (Options{Endpoint: "example.com:443"}).resolve(); r.target != "example.com:443" || r.insecure {
		t.Fatalf("explicit: got %+v", r)
	}
}

func TestValidate(t *testing.T) {
	ts := oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "x"})
	if err := (Options{Insecure: true, TokenSource: ts}).Validate(); err == nil {
		t.Fatal("Insecure with TokenSource: want an error")
	}
	if err := (Options{UnaryInterceptors: []grpc.UnaryClientInterceptor{nil}}).Validate(); err == nil {
		t.Fatal("nil interceptor: want an error")
	}
	if err := (Options{}).Validate(); err != nil {
		t.Fatalf("zero options: %v", err)
	}
}

// TestDialTLSTokenRoutingInterceptors proves a TLS connection sends the
// token as per-RPC credentials, runs the caller's interceptors, and carries
// the caller's outgoing metadata.
func TestDialTLSTokenRoutingInterceptors(t *testing.T) {
	cert, pool := selfSigned(t)
	echo, addr := startEcho(t, cert)
	var unary, stream atomic.Int32
	cc, err := Dial(context.Background(), Options{
		Endpoint:    addr,
		TokenSource: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "tok-123", TokenType: "Bearer"}),
		UserAgent:   "ua-test",
		UnaryInterceptors: []grpc.UnaryClientInterceptor{func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			unary.Add(1)
			return invoker(ctx, method, req, reply, cc, opts...)
		}},
		StreamInterceptors: []grpc.StreamClientInterceptor{func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			stream.Add(1)
			return streamer(ctx, desc, cc, method, opts...)
		}},
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool}))},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-goog-request-params", "subscription=projects%2Fp%2Fsubscriptions%2Fsub")
	if _, err := pubsubpb.NewSubscriberClient(cc).GetSubscription(ctx, &pubsubpb.GetSubscriptionRequest{Subscription: testSub}); err != nil {
		t.Fatal(err)
	}
	md := echo.last()
	if got := md.Get("authorization"); len(got) != 1 || got[0] != "Bearer tok-123" {
		t.Errorf("authorization = %q, want Bearer tok-123", got)
	}
	if got := md.Get("x-goog-request-params"); len(got) != 1 || got[0] != "subscription=projects%2Fp%2Fsubscriptions%2Fsub" {
		t.Errorf("x-goog-request-params = %q", got)
	}
	if got := md.Get("user-agent"); len(got) != 1 || !strings.HasPrefix(got[0], "ua-test") {
		t.Errorf("user-agent = %q", got)
	}
	if unary.Load() != 1 {
		t.Errorf("unary interceptor ran %d times, want 1", unary.Load())
	}
	// A stream interceptor runs for streaming calls only; opening one is
	// enough to see it (the echo server leaves StreamingPull unimplemented).
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if s, err := pubsubpb.NewSubscriberClient(cc).StreamingPull(sctx); err == nil {
		_, _ = s.Recv()
	}
	if stream.Load() != 1 {
		t.Errorf("stream interceptor ran %d times, want 1", stream.Load())
	}
}

// TestDialEmulatorPlaintext proves PUBSUB_EMULATOR_HOST gives a plaintext
// connection that sends no credentials.
func TestDialEmulatorPlaintext(t *testing.T) {
	echo, addr := startEcho(t, nil)
	t.Setenv(EmulatorHostEnv, addr)
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(t.TempDir(), "absent.json")) // ADC must not be consulted
	cc, err := Dial(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if cc.Target() != addr {
		t.Errorf("target = %q, want %q", cc.Target(), addr)
	}
	if _, err := pubsubpb.NewSubscriberClient(cc).GetSubscription(context.Background(), &pubsubpb.GetSubscriptionRequest{Subscription: testSub}); err != nil {
		t.Fatal(err)
	}
	if got := echo.last().Get("authorization"); len(got) != 0 {
		t.Errorf("emulator call carried credentials %q", got)
	}
}

// TestDialADC proves Application Default Credentials are found, asked for
// the Pub/Sub scope, and sent: a service-account key file points its
// token_uri at a local token endpoint.
func TestDialADC(t *testing.T) {
	var asked atomic.Value
	tokenSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		asked.Store(jwtClaim(r.Form.Get("assertion"), "scope"))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"access_token":"adc-token","token_type":"Bearer","expires_in":3600}`))
	}))
	defer tokenSrv.Close()
	defer tokenSrv.CloseClientConnections()
	keyFile := writeServiceAccount(t, tokenSrv.URL)
	t.Setenv(EmulatorHostEnv, "")
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", keyFile)

	cert, pool := selfSigned(t)
	echo, addr := startEcho(t, cert)
	cc, err := Dial(context.Background(), Options{
		Endpoint:    addr,
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool}))},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if _, err := pubsubpb.NewSubscriberClient(cc).GetSubscription(context.Background(), &pubsubpb.GetSubscriptionRequest{Subscription: testSub}); err != nil {
		t.Fatal(err)
	}
	if got := echo.last().Get("authorization"); len(got) != 1 || got[0] != "Bearer adc-token" {
		t.Errorf("authorization = %q, want Bearer adc-token", got)
	}
	if got, _ := asked.Load().(string); got != scope {
		t.Errorf("token requested for scope %q, want %q", got, scope)
	}
}

// TestADCRefreshAfterUnauthenticated: a call rejected as UNAUTHENTICATED
// (unary or stream) makes the next call carry a freshly fetched token,
// not the cached one.
func TestADCRefreshAfterUnauthenticated(t *testing.T) {
	var fetches atomic.Int32
	tokenSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":"adc-token-%d","token_type":"Bearer","expires_in":3600}`, n)
	}))
	defer tokenSrv.Close()
	defer tokenSrv.CloseClientConnections()
	t.Setenv(EmulatorHostEnv, "")
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", writeServiceAccount(t, tokenSrv.URL))

	cert, pool := selfSigned(t)
	echo, addr := startEcho(t, cert)
	echo.reject = 1
	cc, err := Dial(context.Background(), Options{
		Endpoint:    addr,
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool}))},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := pubsubpb.NewSubscriberClient(cc)
	get := func() error {
		_, err := client.GetSubscription(context.Background(), &pubsubpb.GetSubscriptionRequest{Subscription: testSub})
		return err
	}
	if err := get(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("first call: %v, want UNAUTHENTICATED", err)
	}
	if err := get(); err != nil {
		t.Fatal(err)
	}
	if err := get(); err != nil { // cached: no fetch
		t.Fatal(err)
	}
	stream, err := client.StreamingPull(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("stream: %v, want UNAUTHENTICATED", err)
	}
	if err := get(); err != nil {
		t.Fatal(err)
	}
	want := []string{"Bearer adc-token-1", "Bearer adc-token-2", "Bearer adc-token-2", "Bearer adc-token-2", "Bearer adc-token-3"}
	if got := echo.auths(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("tokens sent %v, want %v", got, want)
	}
}

func TestDialADCMissing(t *testing.T) {
	t.Setenv(EmulatorHostEnv, "")
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(t.TempDir(), "absent.json"))
	if _, err := Dial(context.Background(), Options{}); err == nil || !strings.Contains(err.Error(), "application default credentials") {
		t.Fatalf("err = %v, want an application default credentials error", err)
	}
}

func writeServiceAccount(t *testing.T, tokenURI string) string {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	b, err := json.Marshal(map[string]string{
		"type":           "service_account",
		"project_id":     "p",
		"private_key_id": "k1",
		"private_key":    string(pemKey),
		"client_email":   "sa@p.iam.gserviceaccount.com",
		"client_id":      "1",
		"token_uri":      tokenURI,
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "sa.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// jwtClaim returns a string claim of an unverified JWT.
func jwtClaim(jwt, name string) string {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var claims map[string]any
	if json.Unmarshal(b, &claims) != nil {
		return ""
	}
	s, _ := claims[name].(string)
	return s
}

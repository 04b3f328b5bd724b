// Package connect dials Google Cloud Pub/Sub over gRPC the way pubsubflow's
// subscriber and publisher need it.
//
// With PUBSUB_EMULATOR_HOST set (and no Endpoint given) it connects to the
// emulator in plaintext without credentials. Otherwise it connects with TLS
// to pubsub.googleapis.com:443 and sends Application Default Credentials
// (golang.org/x/oauth2/google, scope https://www.googleapis.com/auth/pubsub),
// or a caller's token source, as per-RPC credentials. Connections are made
// with grpc.NewClient, which connects lazily; the deprecated grpc.Dial is not
// used.
package connect

package pubsubflow_test

import (
	"context"
	"fmt"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"golang.org/x/oauth2"

	"github.com/pubsubflow/pubsubflow"
)

// Dial an emulator (or any plaintext test server). With no Endpoint and no
// PUBSUB_EMULATOR_HOST, Dial would use TLS to pubsub.googleapis.com:443 and
// Application Default Credentials.
func ExampleDial() {
	cc, err := pubsubflow.Dial(context.Background(), pubsubflow.ConnectOptions{Endpoint: "localhost:8085", Insecure: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cc.Close()
	_ = pubsubpb.NewSubscriberClient(cc) // hand this to source.Subscribe
	fmt.Println(cc.Target())
	// Output: localhost:8085
}

// Validate refuses options that cannot work together: credentials must
// never travel in plaintext.
func ExampleConnectOptions_Validate() {
	err := pubsubflow.ConnectOptions{Insecure: true, TokenSource: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "t"})}.Validate()
	fmt.Println(err != nil)
	// Output: true
}

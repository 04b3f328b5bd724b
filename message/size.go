package message

import (
	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/proto"
)

func protoSize(rm *pubsubpb.ReceivedMessage) int { return proto.Size(rm) }

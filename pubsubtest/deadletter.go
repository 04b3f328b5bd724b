package pubsubtest

import (
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
)

// Attributes the service adds to a message it forwards to a dead-letter
// topic.
const (
	attrDeadLetterDeliveryCount       = "CloudPubSubDeadLetterSourceDeliveryCount"
	attrDeadLetterSubscription        = "CloudPubSubDeadLetterSourceSubscription"
	attrDeadLetterSubscriptionProject = "CloudPubSubDeadLetterSourceSubscriptionProject"
	attrDeadLetterTopicPublishTime    = "CloudPubSubDeadLetterSourceTopicPublishTime"
)

// deadLetterTimeLayout is how the service writes the source publish time:
// milliseconds and a numeric UTC offset.
const deadLetterTimeLayout = "2006-01-02T15:04:05.000-07:00"

// redeliverLocked handles a failed delivery (a nack, or an expired ack
// deadline) of an entry just released: past the dead-letter policy's
// attempts it goes to the dead-letter topic; with a retry policy it waits
// out its backoff; otherwise it is ready again at once.
func (s *Server) redeliverLocked(e *entry, now time.Time) {
	sub := e.sub
	if dlp := sub.pb.GetDeadLetterPolicy(); dlp != nil && e.attempts >= dlp.MaxDeliveryAttempts {
		if s.deadLetterLocked(e, dlp.DeadLetterTopic) {
			return
		}
	}
	if rp := sub.pb.GetRetryPolicy(); rp != nil {
		if d := backoff(rp, e.attempts); d > 0 {
			s.delayLocked(e, now.Add(d))
			return
		}
	}
	s.requeueLocked(e)
}

// deadLetterLocked publishes a copy of e's message to the dead-letter topic
// with the service's source attributes, and settles e as acknowledged on
// its subscription. It reports false, leaving e alone, when the topic no
// longer exists or the backlog bound refuses the copy: the message is then
// redelivered, as the service does while it cannot forward it.
func (s *Server) deadLetterLocked(e *entry, topicName string) bool {
	t := s.topics[topicName]
	if t == nil {
		return false
	}
	sub := e.sub
	src := e.msg.pb
	attrs := make(map[string]string, len(src.Attributes)+4)
	for k, v := range src.Attributes {
		attrs[k] = v
	}
	project, id := splitName(sub.name)
	attrs[attrDeadLetterDeliveryCount] = strconv.Itoa(int(e.attempts))
	attrs[attrDeadLetterSubscription] = id
	attrs[attrDeadLetterSubscriptionProject] = project
	attrs[attrDeadLetterTopicPublishTime] = e.msg.publishTime().UTC().Format(deadLetterTimeLayout)
	fwd := &pubsubpb.PubsubMessage{Data: src.Data, Attributes: attrs, OrderingKey: src.OrderingKey}
	if _, err := s.publishLocked(t, []*pubsubpb.PubsubMessage{fwd}); err != nil {
		return false
	}
	sub.stats.DeadLettered++
	s.settledLocked(e)
	return true
}

// splitName splits "projects/{project}/{kind}/{id}" into project and id.
func splitName(name string) (project, id string) {
	parts := strings.Split(name, "/")
	if len(parts) != 4 {
		return "", name
	}
	return parts[1], parts[3]
}

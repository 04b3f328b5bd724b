package pubsubtest

import (
	"strconv"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"github.com/pubsubflow/pubsubflow/stage"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// publishLocked assigns ids and the publish time to msgs (which the server
// now owns) and enqueues them on every subscription of t whose filter they
// match. It fails, changing nothing, when the backlog bound has no room.
func (s *Server) publishLocked(t *topic, msgs []*pubsubpb.PubsubMessage) ([]string, error) {
	if err := s.checkRoomLocked(t, msgs); err != nil {
		return nil, err
	}
	now := timestamppb.New(time.Now())
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		seq := s.newCountersLocked()
		m.MessageId = strconv.FormatUint(seq, 10)
		m.PublishTime = now
		ids[i] = m.MessageId
		msg := &message{seq: seq, pb: m, size: int64(proto.Size(m))}
		for _, sub := range t.subs {
			sub.stats.Published++
			e := &entry{msg: msg, sub: sub, heapIdx: -1}
			s.holdLocked(sub, msg.held())
			if f := sub.feat.filter; f != nil && !f.match(m.Attributes) {
				sub.stats.Filtered++
				s.settledLocked(e)
				continue
			}
			s.enqueueNewLocked(e)
		}
		if t.feat.snaps != nil || t.pb.MessageRetentionDuration != nil {
			s.retainPublishedLocked(t, msg)
		}
	}
	for _, sub := range t.subs {
		s.wakeSubLocked(sub)
	}
	return ids, nil
}

// enqueueNewLocked queues a newly published entry: ready, or behind the
// message of its ordering key that is already ready or out.
func (s *Server) enqueueNewLocked(e *entry) {
	sub := e.sub
	if key := e.msg.pb.OrderingKey; key != "" && sub.ordered() {
		if q, busy := sub.keys[key]; busy {
			e.state = stateKeyWait
			q.Push(e)
			return
		}
		sub.keys[key] = &stage.Ring[*entry]{}
	}
	e.state = stateReady
	sub.ready.Push(e)
}

// wakeSubLocked tells the open streams and waiting Pulls of sub that
// messages are ready. The channel sends never block.
func (s *Server) wakeSubLocked(sub *subscription) {
	if sub.ready.Len() == 0 {
		return
	}
	for st := range sub.streams {
		st.wake()
	}
	if sub.pullWait != nil {
		close(sub.pullWait)
		sub.pullWait = nil
	}
}

// deliverLocked hands a ready entry out: a fresh ack id, the next delivery
// attempt, and a deadline in the lease heap.
func (s *Server) deliverLocked(e *entry, st *stream, deadline time.Duration, now time.Time) *pubsubpb.ReceivedMessage {
	sub := e.sub
	e.attempts++
	s.nextAck++
	s.ackBuf = strconv.AppendUint(append(s.ackBuf[:0], "ack-"...), s.nextAck, 36)
	e.ackID = string(s.ackBuf)
	e.state = stateOut
	e.deadline = now.Add(deadline)
	e.stream = st
	sub.out[e.ackID] = e
	s.leases.push(e)
	if e.heapIdx == 0 {
		select {
		case s.expiryWake <- struct{}{}:
		default:
		}
	}
	sub.stats.Delivered++
	if e.attempts > 1 {
		sub.stats.Redelivered++
	}
	if c := s.countersLocked(e.msg.seq); c != nil {
		c.deliveries++
	}
	if st != nil {
		st.outMsgs++
		st.outBytes += e.msg.size
		st.info.Delivered++
		if st.outMsgs > st.info.MaxOutstanding {
			st.info.MaxOutstanding = st.outMsgs
		}
		if st.outBytes > st.info.MaxOutstandingBytesSeen {
			st.info.MaxOutstandingBytesSeen = st.outBytes
		}
		if st.outMsgs > sub.stats.MaxOutstanding {
			sub.stats.MaxOutstanding = st.outMsgs
		}
	}
	rm := &pubsubpb.ReceivedMessage{AckId: e.ackID, Message: e.msg.pb, DeliveryAttempt: e.attempts}
	if !s.cfg.alwaysAttempts && sub.pb.DeadLetterPolicy == nil {
		rm.DeliveryAttempt = 0 // the service sets it only with a dead-letter policy
	}
	return rm
}

// releaseLocked ends the lease of an outstanding entry: the ack id dies, the
// deadline leaves the heap, and the stream it was out on gets its flow
// control budget back.
func (s *Server) releaseLocked(e *entry) {
	sub := e.sub
	delete(sub.out, e.ackID)
	s.leases.remove(e)
	e.ackID = ""
	if st := e.stream; st != nil {
		st.outMsgs--
		st.outBytes -= e.msg.size
		if (st.maxMsgs > 0 || st.maxBytes > 0) && sub.ready.Len() > 0 {
			st.wake() // what waits may fit now
		}
		e.stream = nil
	}
}

// ackLocked acknowledges the message behind ackID; it reports false when
// the ack id is not live (stale, expired, already settled or malformed).
func (s *Server) ackLocked(sub *subscription, ackID string) bool {
	e := sub.out[ackID]
	if e == nil {
		return false
	}
	s.releaseLocked(e)
	sub.stats.Acked++
	if c := s.countersLocked(e.msg.seq); c != nil {
		c.acks++
	}
	s.settledLocked(e)
	return true
}

// requeueLocked puts a released entry back in the ready queue (nack or
// expiry). An ordered key stays busy: the same message goes out again
// before the ones behind it.
func (s *Server) requeueLocked(e *entry) {
	e.state = stateReady
	e.sub.ready.Push(e)
	s.wakeSubLocked(e.sub)
}

// modackLocked sets the deadline of the message behind ackID to now+secs;
// 0 is a nack. It reports false when the ack id is not live.
func (s *Server) modackLocked(sub *subscription, ackID string, secs int32, now time.Time) bool {
	e := sub.out[ackID]
	if e == nil {
		return false
	}
	if secs == 0 {
		s.releaseLocked(e)
		sub.stats.Nacked++
		s.redeliverLocked(e, now)
		return true
	}
	sub.stats.ModAcks++
	e.deadline = now.Add(time.Duration(secs) * time.Second)
	s.leases.fix(e.heapIdx)
	if e.heapIdx == 0 {
		select {
		case s.expiryWake <- struct{}{}:
		default:
		}
	}
	return true
}

// expireLocked redelivers every message whose deadline passed and returns
// how long until the next deadline (or -1 when none is left).
func (s *Server) expireLocked(now time.Time) time.Duration {
	for len(s.leases) > 0 {
		e := s.leases[0]
		if wait := e.deadline.Sub(now); wait > 0 {
			return wait
		}
		s.releaseLocked(e)
		e.sub.stats.Expired++
		s.redeliverLocked(e, now)
	}
	return -1
}

// expiryLoop is the one goroutine that enforces ack deadlines. It never
// holds s.mu while it waits.
func (s *Server) expiryLoop() {
	defer s.wg.Done()
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		s.mu.Lock()
		now := time.Now()
		wait := s.expireLocked(now)
		if w := s.releaseDelayedLocked(now); w >= 0 && (wait < 0 || w < wait) {
			wait = w
		}
		s.mu.Unlock()
		if wait >= 0 {
			t.Reset(wait)
		}
		select {
		case <-t.C:
		case <-s.expiryWake:
		case <-s.done:
			t.Stop()
			return
		}
		t.Stop()
	}
}

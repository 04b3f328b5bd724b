package pubsubtest

import (
	"strconv"
	"time"

	"cloud.google.com/go/pubsub/v2/apiv1/pubsubpb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// publishLocked assigns ids and the publish time to msgs (which the server
// now owns) and enqueues them on every subscription of t.
func (s *Server) publishLocked(t *topic, msgs []*pubsubpb.PubsubMessage) []string {
	now := timestamppb.New(time.Now())
	ids := make([]string, len(msgs))
	for i, m := range msgs {
		s.msgStats = append(s.msgStats, msgCounters{})
		seq := uint64(len(s.msgStats))
		m.MessageId = strconv.FormatUint(seq, 10)
		m.PublishTime = now
		ids[i] = m.MessageId
		msg := &message{seq: seq, pb: m, size: int64(proto.Size(m))}
		for _, sub := range t.subs {
			sub.stats.Published++
			s.enqueueNewLocked(&entry{msg: msg, sub: sub, heapIdx: -1})
		}
	}
	for _, sub := range t.subs {
		s.wakeSubLocked(sub)
	}
	return ids
}

// enqueueNewLocked queues a newly published entry: ready, or behind the
// message of its ordering key that is already ready or out.
func (s *Server) enqueueNewLocked(e *entry) {
	sub := e.sub
	if key := e.msg.pb.OrderingKey; key != "" && sub.ordered() {
		if q, busy := sub.keys[key]; busy {
			e.state = stateKeyWait
			q.pushBack(e)
			return
		}
		sub.keys[key] = &ring[*entry]{}
	}
	e.state = stateReady
	sub.ready.pushBack(e)
}

// wakeSubLocked tells the open streams and waiting Pulls of sub that
// messages are ready. The channel sends never block.
func (s *Server) wakeSubLocked(sub *subscription) {
	if sub.ready.len() == 0 {
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
	s.msgStats[e.msg.seq-1].deliveries++
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
	return &pubsubpb.ReceivedMessage{AckId: e.ackID, Message: e.msg.pb, DeliveryAttempt: e.attempts}
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
		if (st.maxMsgs > 0 || st.maxBytes > 0) && sub.ready.len() > 0 {
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
	e.state = stateAcked
	sub.stats.Acked++
	s.msgStats[e.msg.seq-1].acks++
	if key := e.msg.pb.OrderingKey; key != "" && sub.ordered() {
		if q := sub.keys[key]; q != nil && q.len() > 0 {
			next := q.popFront()
			next.state = stateReady
			sub.ready.pushBack(next)
			s.wakeSubLocked(sub)
		} else {
			delete(sub.keys, key)
		}
	}
	return true
}

// requeueLocked puts a released entry back in the ready queue (nack or
// expiry). An ordered key stays busy: the same message goes out again
// before the ones behind it.
func (s *Server) requeueLocked(e *entry) {
	e.state = stateReady
	e.sub.ready.pushBack(e)
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
		s.requeueLocked(e)
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
		s.requeueLocked(e)
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
		wait := s.expireLocked(time.Now())
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

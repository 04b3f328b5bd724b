package gcemu

import (
	"bytes"
	"strings"
	"sync"
)

// logLimit bounds the emulator log kept in memory: a failing test prints the
// last logLimit bytes, which hold the lines about what just went wrong.
const logLimit = 1 << 20

// logBuf keeps the tail of the emulator's output and lets a reader wait for
// a line, so readiness is seen in the same bytes that are kept for failures.
type logBuf struct {
	mu      sync.Mutex
	buf     []byte
	dropped int           // bytes dropped from the front; dropped+len(buf) bytes were written
	changed chan struct{} // closed and replaced on every write
}

func newLogBuf() *logBuf { return &logBuf{changed: make(chan struct{})} }

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if over := len(l.buf) - logLimit; over > 0 {
		l.dropped += over
		l.buf = append(l.buf[:0], l.buf[over:]...)
	}
	close(l.changed)
	l.changed = make(chan struct{})
	return len(p), nil
}

// contains reports whether the kept log holds s, and a channel closed at the
// next write.
func (l *logBuf) contains(s string) (bool, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Contains(l.buf, []byte(s)), l.changed
}

// offset is the number of bytes written so far, for since.
func (l *logBuf) offset() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped + len(l.buf)
}

// since returns what was written after offset off (as much as is kept).
func (l *logBuf) since(off int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	start := off - l.dropped
	if start < 0 {
		return "[… earlier output dropped …]\n" + string(l.buf)
	}
	return string(l.buf[start:])
}

// String returns the kept log, noting how much older output was dropped.
func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	if l.dropped > 0 {
		b.WriteString("[… earlier output dropped …]\n")
	}
	b.Write(l.buf)
	return b.String()
}

package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/pubsubflow/pubsubflow/internal/limits"
)

// longestTopicName is the length of the longest topic name the service
// allows: "projects/" + a 100-byte project id + "/topics/" + a 255-byte id.
const longestTopicName = len("projects/") + limits.MaxProjectIDLength + len("/topics/") + limits.MaxResourceIDLength

// maxLineBytes is the longest line publish sends with these attributes and
// ordering key: the most data that fits, with them, in one publish request
// (limits.MaxRequestBytes encoded) to a topic of the longest name, so that
// the limit is the same whatever the topic.
func maxLineBytes(attrs map[string]string, orderingKey string) int {
	envelope := 0 // the encoded message without its data
	for k, v := range attrs {
		envelope += field(field(len(k)) + field(len(v)))
	}
	if orderingKey != "" {
		envelope += field(len(orderingKey))
	}
	request := func(data int) int { return field(longestTopicName) + field(envelope+field(data)) }
	// Varint lengths shrink by a byte at a time: start from the estimate
	// and step down to the exact fit.
	d := min(limits.MaxDataBytes, limits.MaxRequestBytes-request(0))
	for d > 0 && request(d) > limits.MaxRequestBytes {
		d--
	}
	return d
}

// field is the encoded size of a length-delimited protobuf field of n
// bytes with a one-byte tag (every field of a PublishRequest and of its
// messages).
func field(n int) int { return 1 + protowire.SizeBytes(n) }

// stdinLine is one line read from stdin (its 1-based number and its bytes
// without the "\n"), or the error that ended the reading: io.EOF at the
// end.
type stdinLine struct {
	n    int
	data []byte
	err  error
}

// readLines reads r's lines in a goroutine and hands them over one at a
// time, so that at most one line waits unpublished in memory. The
// goroutine ends after the last line, an error, or once quit is closed and
// its current Read returns: a Read blocked on an idle stdin cannot be
// interrupted, and the process exits under it.
func readLines(r io.Reader, limit int, quit <-chan struct{}) <-chan stdinLine {
	out := make(chan stdinLine)
	go func() {
		lr := &lineReader{br: bufio.NewReaderSize(r, 64<<10), limit: limit}
		for {
			l := lr.next()
			select {
			case out <- l:
			case <-quit:
				return
			}
			if l.err != nil {
				return
			}
		}
	}()
	return out
}

// lineReader splits a stream into lines byte for byte: only the "\n" that
// ends a line is removed (a "\r" before it is kept), and a last line
// without "\n" is a line too. A line over limit bytes is an error.
type lineReader struct {
	br    *bufio.Reader
	limit int
	n     int // lines read
}

func (lr *lineReader) next() stdinLine {
	var chunks [][]byte // the start of a line longer than the reader's buffer
	size := 0           // their bytes
	for {
		frag, err := lr.br.ReadSlice('\n')
		n := size + len(frag)
		if err == nil {
			n-- // the "\n"
		}
		if n > lr.limit {
			lr.n++
			return stdinLine{n: lr.n, err: fmt.Errorf("line %d is longer than %s bytes, the longest line a publish request carries (see --help)",
				lr.n, grouped(lr.limit))}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			chunks = append(chunks, bytes.Clone(frag))
			size += len(frag)
			continue
		}
		// One allocation of the line's size: appending fragment after
		// fragment would allocate several times a long line's size.
		line := make([]byte, 0, size+len(frag))
		for _, c := range chunks {
			line = append(line, c...)
		}
		line = append(line, frag...)
		switch {
		case err == nil:
			lr.n++
			return stdinLine{n: lr.n, data: line[:len(line)-1]}
		case errors.Is(err, io.EOF) && len(line) > 0:
			lr.n++
			return stdinLine{n: lr.n, data: line}
		case errors.Is(err, io.EOF):
			return stdinLine{n: lr.n, err: io.EOF}
		}
		return stdinLine{n: lr.n, err: fmt.Errorf("reading stdin after line %d: %w", lr.n, err)}
	}
}

// grouped writes n (≥ 0) with a comma between groups of three digits.
func grouped(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

package bench

import (
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultSampleEvery is how often a Meter samples the heap.
const DefaultSampleEvery = 2 * time.Millisecond

// heapObjects is the runtime metric a Meter samples: bytes of heap objects,
// live or not yet swept (what MemStats.HeapAlloc reports), read without
// stopping the world.
const heapObjects = "/memory/classes/heap/objects:bytes"

// Meter measures one run of a benchmark: wall time, the process's CPU time
// (user + system, every goroutine of the process, an in-process server
// included) and the peak of the heap, sampled every few milliseconds by a
// goroutine of its own. Start it with StartMeter and end it with Stop,
// which stops that goroutine.
type Meter struct {
	start    time.Time
	cpu      time.Duration
	stop     chan struct{}
	done     chan struct{}
	mu       sync.Mutex
	peakHeap uint64
}

// Result is what a Meter measured.
type Result struct {
	Elapsed time.Duration
	// CPU is user plus system time of the whole process over the run.
	CPU time.Duration
	// PeakHeap is the largest heap sample (bytes of heap objects).
	PeakHeap uint64
	// PeakRSS is the process's peak resident set size since it started
	// (VmHWM from /proc/self/status; 0 where that is not available).
	PeakRSS uint64
}

// StartMeter starts measuring; every is the heap sampling period
// (0: DefaultSampleEvery).
func StartMeter(every time.Duration) *Meter {
	if every <= 0 {
		every = DefaultSampleEvery
	}
	m := &Meter{stop: make(chan struct{}), done: make(chan struct{})}
	m.peakHeap = HeapBytes()
	m.cpu = ProcessCPU()
	m.start = time.Now()
	go m.sample(every)
	return m
}

func (m *Meter) sample(every time.Duration) {
	defer close(m.done)
	t := time.NewTicker(every)
	defer t.Stop()
	s := []metrics.Sample{{Name: heapObjects}}
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			metrics.Read(s)
			m.note(s[0].Value.Uint64())
		}
	}
}

func (m *Meter) note(v uint64) {
	m.mu.Lock()
	m.peakHeap = max(m.peakHeap, v)
	m.mu.Unlock()
}

// Stop ends the measurement and returns it. Call it once.
func (m *Meter) Stop() Result {
	elapsed := time.Since(m.start)
	cpu := ProcessCPU() - m.cpu
	m.note(HeapBytes())
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return Result{Elapsed: elapsed, CPU: cpu, PeakHeap: m.peakHeap, PeakRSS: peakRSS()}
}

// HeapBytes is the current bytes of heap objects (live or not yet swept).
func HeapBytes() uint64 {
	s := []metrics.Sample{{Name: heapObjects}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// ProcessCPU is the user plus system CPU time the process has used so far
// (getrusage RUSAGE_SELF); 0 where that is unavailable.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSS reads the process's resident-set high-water mark (Linux).
func peakRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb * 1024
		}
	}
	return 0
}

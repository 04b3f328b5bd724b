package gcemu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"time"
)

// ReadyTimeout bounds how long Launch waits for the emulator to listen. It
// is usually ready in 3–20 s; a JVM starting on a loaded CI machine can be
// slower, and a deadline far above that only matters when something is broken.
const ReadyTimeout = 90 * time.Second

// stopTimeout bounds the wait for the killed process to be reaped.
const stopTimeout = 10 * time.Second

// portAttempts bounds the retries when the free port chosen was taken by
// someone else between our check and the emulator's bind.
const portAttempts = 3

// Emulator is one running emulator process. Stop it with Stop.
type Emulator struct {
	addr string
	cmd  *exec.Cmd
	log  *logBuf
	done chan struct{} // closed when the process has exited
	err  error         // the process's exit, valid after done
}

// Launch runs the emulator at path bin on a free loopback port and waits
// until it prints that it listens (at most ReadyTimeout, or until ctx ends).
// On error the process is already stopped and the error holds its log.
func Launch(ctx context.Context, bin string) (*Emulator, error) {
	var errs []error
	for range portAttempts {
		e, err := launchOnce(ctx, bin)
		if err == nil {
			return e, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil || !errors.Is(err, errExitedEarly) {
			break
		}
	}
	return nil, errors.Join(errs...)
}

var errExitedEarly = errors.New("the emulator exited before it listened")

func launchOnce(ctx context.Context, bin string) (*Emulator, error) {
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("gcemu: choosing a port: %w", err)
	}
	e := &Emulator{
		addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		log:  newLogBuf(),
		done: make(chan struct{}),
	}
	e.cmd = exec.Command(bin, "--host=127.0.0.1", "--port="+strconv.Itoa(port))
	e.cmd.Stdout = e.log
	e.cmd.Stderr = e.log
	ownGroup(e.cmd)
	if err := e.cmd.Start(); err != nil {
		return nil, fmt.Errorf("gcemu: starting %s: %w", bin, err)
	}
	go func() {
		e.err = e.cmd.Wait()
		close(e.done)
	}()

	ready := "Server started, listening on " + strconv.Itoa(port)
	timer := time.NewTimer(ReadyTimeout)
	defer timer.Stop()
	for {
		ok, changed := e.log.contains(ready)
		if ok {
			return e, nil
		}
		select {
		case <-changed:
		case <-e.done:
			// Output written just before exit may hold the line.
			if ok, _ := e.log.contains(ready); ok {
				return nil, fmt.Errorf("gcemu: the emulator on %s exited right after starting (%v); its log:\n%s", e.addr, e.err, e.log)
			}
			return nil, fmt.Errorf("gcemu: %w (%v) on %s; its log:\n%s", errExitedEarly, e.err, e.addr, e.log)
		case <-timer.C:
			_ = e.Stop()
			return nil, fmt.Errorf("gcemu: the emulator did not print %q within %v; its log:\n%s", ready, ReadyTimeout, e.log)
		case <-ctx.Done():
			_ = e.Stop()
			return nil, fmt.Errorf("gcemu: waiting for the emulator: %w", ctx.Err())
		}
	}
}

// freePort asks the kernel for a loopback port nobody listens on. Another
// process may take it before the emulator binds; Launch then retries.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Addr is the emulator's "127.0.0.1:port", the value PUBSUB_EMULATOR_HOST takes.
func (e *Emulator) Addr() string { return e.addr }

// Log returns the emulator's output so far (its last MiB).
func (e *Emulator) Log() string { return e.log.String() }

// Stop kills the emulator's whole process group — the Java server, not only
// the launcher script — and waits (bounded) until it has exited.
func (e *Emulator) Stop() error {
	killGroup(e.cmd)
	select {
	case <-e.done:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("gcemu: the emulator (pid %d) did not exit within %v of SIGKILL", e.cmd.Process.Pid, stopTimeout)
	}
}

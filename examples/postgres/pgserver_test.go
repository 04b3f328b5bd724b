package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
)

// startPostgres starts a PostgreSQL server of the test's own and returns
// its connection string: initdb into t.TempDir(), a free loopback port,
// the unix socket in the same temp dir, fsync off (a test database);
// pg_ctl stops it at cleanup. Without PostgreSQL it skips, saying how to
// install it; under CI=true that is a failure instead.
//
// PostgreSQL refuses to run as root. As root (CI and these machines run
// the tests as root), initdb, pg_ctl and the server run as the "postgres"
// user that Debian's postgresql package creates, or else as "nobody",
// with the temp dir handed to that user; nothing else changes owner.
func startPostgres(t *testing.T) string {
	t.Helper()
	bin := postgresBin()
	if bin == "" {
		msg := "PostgreSQL not found: initdb and pg_ctl neither on PATH nor in /usr/lib/postgresql/*/bin (Debian: apt-get install postgresql)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	dir := t.TempDir()
	cred, err := serverUser(dir)
	if err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	run := func(name string, args ...string) error {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Env = append(os.Environ(), "LC_ALL=C", "LANG=C")
		cmd.Dir = dir
		if cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s %v: %w\n%s", name, args, err, out.String())
		}
		return nil
	}
	if err := run("initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(dir, "postgres.log")
	var port int
	for attempt := 0; ; attempt++ {
		port = freePort(t)
		opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off", port, dir)
		err := run("pg_ctl", "-D", data, "-l", logFile, "-o", opts, "-w", "-t", "60", "start")
		if err == nil {
			break
		}
		if attempt == 2 { // a port taken between freePort and the start, three times: give up
			log, _ := os.ReadFile(logFile)
			t.Fatalf("%v\nserver log:\n%s", err, log)
		}
	}
	t.Cleanup(func() {
		if err := run("pg_ctl", "-D", data, "-m", "fast", "-w", "stop"); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			log, _ := os.ReadFile(logFile)
			t.Logf("PostgreSQL log:\n%s", log)
		}
	})
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
}

// postgresBin finds the directory holding initdb and pg_ctl: PATH first,
// then Debian's /usr/lib/postgresql/VERSION/bin, the newest version.
func postgresBin() string {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "pg_ctl")); err == nil {
			return dir
		}
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	slices.SortFunc(found, func(a, b string) int { return version(b) - version(a) })
	for _, p := range found {
		if _, err := os.Stat(filepath.Join(filepath.Dir(p), "pg_ctl")); err == nil {
			return filepath.Dir(p)
		}
	}
	return ""
}

// version reads the major version out of /usr/lib/postgresql/V/bin/initdb.
func version(initdb string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return v
}

// serverUser returns nil when not root; as root, the credentials of the
// user the server runs as ("postgres", else "nobody"), after handing dir
// to it and letting it reach dir (its parent, made by the testing
// package, is private to root).
func serverUser(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		if u, err = user.Lookup("nobody"); err != nil {
			return nil, fmt.Errorf("running as root and neither a postgres nor a nobody user to run PostgreSQL as: %w", err)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

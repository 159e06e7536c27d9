// Command hangar-agent runs as PID 1 inside a Hangar persistent sandbox. It serves the HTTP/1.1 API
// described in PROTOCOL.md on a Unix-domain listening socket inherited as file descriptor 3 (or
// created by -listen), starts and tracks processes, reaps every child, and manipulates files.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func envInt(name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		log.Printf("ignoring invalid %s=%q", name, v)
		return def
	}
	return n
}

// logKept is how much of its own log the agent keeps in memory (GET /log).
const logKept = 64 << 10

func run(args []string) int {
	ring := newLogRing(logKept)
	log.SetFlags(log.LstdFlags | log.LUTC)
	log.SetPrefix("hangar-agent: ")
	log.SetOutput(io.MultiWriter(ring, os.Stderr))
	fl := flag.NewFlagSet("hangar-agent", flag.ContinueOnError)
	listen := fl.String("listen", "", "create and listen on this Unix socket path instead of using inherited fd 3")
	maxOutput := fl.Int64("max-output", envInt("HANGAR_AGENT_MAX_OUTPUT", 4<<20),
		"bytes of output kept per process, stdout+stderr (env HANGAR_AGENT_MAX_OUTPUT)")
	maxFinished := fl.Int64("max-finished", envInt("HANGAR_AGENT_MAX_FINISHED", 200),
		"finished process records kept (env HANGAR_AGENT_MAX_FINISHED)")
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if fl.NArg() > 0 {
		log.Printf("unexpected arguments: %v", fl.Args())
		return 2
	}

	// Install the SIGTERM handler and the reaper before anything can start a child.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	// A handled (not ignored) SIGPIPE: writes to a closed stderr fail with EPIPE instead of killing
	// the agent, and commands still start with the default disposition (handlers reset on exec).
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	// The Go runtime raises RLIMIT_NOFILE's soft limit to the hard limit at startup and commands
	// inherit that; HANGAR_AGENT_NOFILE restores the soft limit the host wants them to have.
	if n := envInt("HANGAR_AGENT_NOFILE", 0); n > 0 {
		var lim syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && uint64(n) <= lim.Max {
			lim.Cur = uint64(n)
			if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
				log.Printf("cannot set RLIMIT_NOFILE to %d: %v", n, err)
			}
		}
	}
	user, err := userFromEnv()
	if err != nil {
		log.Print(err)
		return 1
	}

	l, err := openListener(*listen)
	if err != nil {
		log.Print(err)
		return 1
	}
	markCloexec()
	if user != nil {
		// Before the reaper, the server or any command exists: nothing may start with more.
		if err := setupPrivileges(user); err != nil {
			log.Print(err)
			return 1
		}
	}
	m := NewManager(Config{MaxOutput: *maxOutput, MaxFinished: int(*maxFinished), User: user})

	handler := NewServer(m)
	handler.log = ring
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()

	code := 0
	select {
	case <-sigs:
	case err := <-errc:
		log.Printf("serve: %v", err)
		code = 1
	}
	l.Close()
	m.Shutdown(2 * time.Second)
	if *listen != "" {
		os.Remove(*listen)
	}
	return code
}

func openListener(path string) (net.Listener, error) {
	if path != "" {
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			os.Remove(path) // stale socket from an earlier run
		}
		l, err := net.Listen("unix", path)
		if err != nil {
			return nil, fmt.Errorf("listen %s: %w", path, err)
		}
		return l, nil
	}
	f := os.NewFile(3, "listener")
	if f == nil {
		return nil, errors.New("no listener: fd 3 is not open (use -listen PATH for local runs)")
	}
	l, err := net.FileListener(f) // dups the descriptor (close-on-exec)
	f.Close()                     // fd 3 was inherited without close-on-exec: never pass it on
	if err != nil {
		return nil, fmt.Errorf("fd 3 is not a listening socket: %w", err)
	}
	return l, nil
}

// markCloexec sets close-on-exec on every inherited descriptor above stderr so that no command
// inherits something the runtime passed to the agent.
func markCloexec() {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil || fd <= 2 {
			continue
		}
		syscall.CloseOnExec(fd)
	}
}

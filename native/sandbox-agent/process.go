package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// exitGrace is how long a process whose exit status is known stays "running" while a descendant
	// still holds its stdout/stderr open (e.g. `server &`). After it, the record is finished; output
	// that still arrives is appended to the buffer but the exit line has already been sent.
	exitGrace   = 250 * time.Millisecond
	readBufSize = 32 * 1024
)

// Config holds the agent's tunables.
type Config struct {
	MaxOutput   int64 // bytes kept per process (stdout+stderr combined)
	MaxFinished int   // finished process records kept
	// User is the sandbox user commands and file operations run as; nil: the agent's own uid.
	User *userIDs
}

// requestError is a client error (HTTP 400/409) raised while acting on a process.
type requestError struct {
	status int
	code   string
	msg    string
}

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, a ...interface{}) error {
	return &requestError{400, "bad_request", fmt.Sprintf(format, a...)}
}

func conflict(format string, a ...interface{}) error {
	return &requestError{409, "conflict", fmt.Sprintf(format, a...)}
}

type streamKind uint8

const (
	kindStdout streamKind = iota
	kindStderr
)

func (k streamKind) String() string {
	if k == kindStderr {
		return "stderr"
	}
	return "stdout"
}

// chunk is one read from a pipe. offset is its byte position in the combined output stream. The data
// slice is never modified after it is stored (trimming re-slices), so followers may hold it unlocked.
type chunk struct {
	kind   streamKind
	offset int64
	data   []byte
}

// Proc is one started process.
type Proc struct {
	m         *Manager
	pid       int
	cmd       *string
	args      []string
	cwd       string
	startedAt time.Time
	maxOutput int64

	stdinMu sync.Mutex // serialises writes to stdin (held by the initial-stdin writer too)

	mu          sync.Mutex
	chunks      []chunk
	kept        int64 // bytes held in chunks
	total       int64 // bytes produced (next offset)
	truncated   bool
	notify      chan struct{} // closed and replaced when output or state changes
	notifyUsed  bool
	statusKnown bool // reaped
	status      syscall.WaitStatus
	endedAt     time.Time
	finished    bool // reaped and (pipes drained or grace elapsed)
	timedOut    bool
	openPipes   int
	pipes       []*os.File
	stdin       *os.File // nil when stdin is /dev/null
	stdinKept   bool
	stdinClosed bool
	timer       *time.Timer
	graceTimer  *time.Timer
	// ptmx is the terminal's master side for a process started with a pty (nil otherwise): its output is
	// read from it (as stdout) and its stdin written to it. Closed when the record finishes (a hang-up).
	ptmx      *os.File
	ptyClosed bool
}

// Manager owns the process table and the single reaper.
type Manager struct {
	mu      sync.Mutex // held across fork+register so the reaper never sees an unregistered child pid
	procs   map[int]*Proc
	cfg     Config
	baseEnv []string
	// envMu guards baseEnv and envSealed: SetBaseEnv may replace the base environment until the first
	// process starts (or it was set once); after that it is fixed for the agent's life.
	envMu     sync.Mutex
	envSealed bool
	devNull   int
	sigch     chan os.Signal
}

// NewManager installs the SIGCHLD handler and starts the reaper. Only one Manager may exist per
// process: its reaper waits for every child.
func NewManager(cfg Config) *Manager {
	if cfg.MaxOutput <= 0 {
		cfg.MaxOutput = 4 << 20
	}
	if cfg.MaxFinished <= 0 {
		cfg.MaxFinished = 200
	}
	m := &Manager{procs: make(map[int]*Proc), cfg: cfg, devNull: -1}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HANGAR_AGENT_") {
			m.baseEnv = append(m.baseEnv, kv)
		}
	}
	if fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err == nil {
		m.devNull = fd
	}
	if os.Getpid() != 1 {
		// Outside a pid namespace, become a subreaper so orphans of our commands are still ours.
		_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, 36 /* PR_SET_CHILD_SUBREAPER */, 1, 0)
	}
	m.sigch = make(chan os.Signal, 1)
	signal.Notify(m.sigch, syscall.SIGCHLD)
	go m.reapLoop()
	return m
}

func (m *Manager) setMaxOutput(n int64) {
	m.mu.Lock()
	m.cfg.MaxOutput = n
	m.mu.Unlock()
}

func (m *Manager) reapLoop() {
	for {
		m.reapAll()
		<-m.sigch
	}
}

func (m *Manager) reapAll() {
	for {
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, &ru)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		m.dispatch(pid, ws)
	}
}

func (m *Manager) dispatch(pid int, ws syscall.WaitStatus) {
	m.mu.Lock()
	p := m.procs[pid]
	m.mu.Unlock()
	if p == nil {
		return // an orphan reparented to us, or a pruned record: discard
	}
	p.mu.Lock()
	if p.statusKnown { // a stale record whose pid was reused by an orphan
		p.mu.Unlock()
		return
	}
	p.statusKnown = true
	p.status = ws
	p.endedAt = time.Now()
	if p.timer != nil {
		p.timer.Stop()
	}
	p.closeStdinLocked()
	fin := false
	if p.openPipes == 0 {
		p.finishLocked()
		fin = true
	} else {
		p.graceTimer = time.AfterFunc(exitGrace, p.graceExpired)
		p.wakeLocked()
	}
	p.mu.Unlock()
	if fin {
		m.prune()
	}
}

// StartRequest is the body of POST /processes.
type StartRequest struct {
	Cmd       *string           `json:"cmd"`
	Args      []string          `json:"args"`
	Cwd       string            `json:"cwd"`
	Env       map[string]string `json:"env"`
	Stdin     *string           `json:"stdin"`
	KeepStdin bool              `json:"keepStdin"`
	TimeoutMs int64             `json:"timeoutMs"`
	// Pty runs the process on a new pseudo-terminal of this size (its stdin, stdout and stderr, and its
	// controlling terminal); stdin stays open for /stdin calls.
	Pty *PtySize `json:"pty"`
}

func envLookup(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

func mergeEnv(base []string, over map[string]string) ([]string, error) {
	env := make([]string, 0, len(base)+len(over))
	if len(over) == 0 {
		return append(env, base...), nil
	}
	for k, v := range over {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, badRequest("invalid environment variable name %q", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return nil, badRequest("environment variable %s contains a NUL byte", k)
		}
	}
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := over[k]; !ok {
			env = append(env, kv)
		}
	}
	keys := make([]string, 0, len(over))
	for k := range over {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+over[k])
	}
	return env, nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return false
	}
	return accessible(path, 1 /* X_OK */)
}

// lookPath resolves name like execvp, using the command's PATH and cwd.
func lookPath(name, pathEnv, cwd string) (string, error) {
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(cwd, name)
		}
		if _, err := os.Stat(name); err != nil {
			return "", badRequest("cannot start %s: %v", name, errors.Unwrap(err))
		}
		return name, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			dir = "."
		}
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(cwd, dir)
		}
		if p := filepath.Join(dir, name); isExecutable(p) {
			return p, nil
		}
	}
	return "", badRequest("command not found: %s", name)
}

// SetBaseEnv replaces the base environment of every command (PUT /env): allowed once, and only before any
// process has started, so a warm (pooled) sandbox gets its tenant's environment when it is claimed and
// nothing started before can have seen another. Names and values are checked as a start request's env.
func (m *Manager) SetBaseEnv(env map[string]string) error {
	merged, err := mergeEnv(nil, env)
	if err != nil {
		return err
	}
	m.envMu.Lock()
	defer m.envMu.Unlock()
	if m.envSealed {
		return conflict("the base environment is fixed: it was set already or a process has started")
	}
	m.baseEnv = merged
	m.envSealed = true
	return nil
}

// base returns the base environment and seals it (no SetBaseEnv once a process has started).
func (m *Manager) base() []string {
	m.envMu.Lock()
	defer m.envMu.Unlock()
	m.envSealed = true
	return m.baseEnv
}

func (m *Manager) defaultCwd() string {
	m.envMu.Lock()
	base := m.baseEnv
	m.envMu.Unlock()
	if home, ok := envLookup(base, "HOME"); ok && filepath.IsAbs(home) {
		if fi, err := os.Stat(home); err == nil && fi.IsDir() {
			return home
		}
	}
	return "/"
}

// pipe returns a pollable parent end and a raw blocking child end (both close-on-exec).
func pipe(parentReads bool) (parent *os.File, child int, err error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return nil, -1, err
	}
	pi, ci := p[1], p[0]
	name := "|1"
	if parentReads {
		pi, ci = p[0], p[1]
		name = "|0"
	}
	if err := syscall.SetNonblock(pi, true); err != nil {
		syscall.Close(p[0])
		syscall.Close(p[1])
		return nil, -1, err
	}
	return os.NewFile(uintptr(pi), name), ci, nil
}

// resolve finds the working directory and the program of a start request; it runs as the sandbox user so
// that what the user cannot reach is refused here as it would be by execve.
func (m *Manager) resolve(req *StartRequest, cmd *string, env []string) (cwd, path string, argv []string, err error) {
	cwd = req.Cwd
	if cwd == "" {
		cwd = m.defaultCwd()
	} else {
		if strings.IndexByte(cwd, 0) >= 0 {
			return "", "", nil, badRequest("cwd contains a NUL byte")
		}
		if !filepath.IsAbs(cwd) {
			cwd = filepath.Join(m.defaultCwd(), cwd)
		}
		cwd = filepath.Clean(cwd)
	}
	if fi, err := os.Stat(cwd); err != nil {
		return "", "", nil, badRequest("cwd %s: %v", cwd, errors.Unwrap(err))
	} else if !fi.IsDir() {
		return "", "", nil, badRequest("cwd %s is not a directory", cwd)
	}
	if cmd != nil {
		path = "/bin/sh"
		if isExecutable("/bin/bash") {
			path = "/bin/bash"
		}
		argv = []string{path, "-c", *cmd}
	} else {
		pathEnv, _ := envLookup(env, "PATH")
		if path, err = lookPath(req.Args[0], pathEnv, cwd); err != nil {
			return "", "", nil, err
		}
		argv = req.Args
	}
	return cwd, path, argv, nil
}

// Start validates req and starts the process in its own session and process group.
func (m *Manager) Start(req *StartRequest) (*Proc, error) {
	var cmd *string
	if req.Cmd != nil && *req.Cmd != "" {
		cmd = req.Cmd
	}
	if cmd == nil && len(req.Args) == 0 {
		return nil, badRequest("cmd or args is required")
	}
	if cmd != nil && len(req.Args) > 0 {
		return nil, badRequest("give either cmd or args, not both")
	}
	if cmd != nil && strings.IndexByte(*cmd, 0) >= 0 {
		return nil, badRequest("cmd contains a NUL byte")
	}
	for _, a := range req.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return nil, badRequest("args contain a NUL byte")
		}
	}
	if cmd == nil && req.Args[0] == "" {
		return nil, badRequest("args[0] must not be empty")
	}
	if req.TimeoutMs < 0 {
		return nil, badRequest("timeoutMs must not be negative")
	}
	if req.Pty != nil {
		if err := req.Pty.check(true); err != nil {
			return nil, err
		}
	}
	var stdinData []byte
	if req.Stdin != nil {
		d, err := decodeBase64(*req.Stdin)
		if err != nil {
			return nil, badRequest("stdin is not valid base64")
		}
		stdinData = d
	}
	env, err := mergeEnv(m.base(), req.Env)
	if err != nil {
		return nil, err
	}
	var cwd, path string
	var argv []string
	if err := asUser(m.cfg.User, func() error {
		var err error
		cwd, path, argv, err = m.resolve(req, cmd, env)
		return err
	}); err != nil {
		return nil, err
	}

	// Pipes. Child ends are closed in the parent after the fork whatever happens.
	var childFds []int
	var parentFiles []*os.File
	cleanup := func(all bool) {
		for _, fd := range childFds {
			syscall.Close(fd)
		}
		childFds = nil
		if all {
			for _, f := range parentFiles {
				f.Close()
			}
		}
	}
	if req.Pty != nil {
		return m.startPty(req, cmd, cwd, path, argv, env, stdinData)
	}
	outR, outW, err := pipe(true)
	if err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	childFds, parentFiles = append(childFds, outW), append(parentFiles, outR)
	errR, errW, err := pipe(true)
	if err != nil {
		cleanup(true)
		return nil, fmt.Errorf("pipe: %w", err)
	}
	childFds, parentFiles = append(childFds, errW), append(parentFiles, errR)
	var stdinW *os.File
	stdinFd := m.devNull
	if req.KeepStdin || req.Stdin != nil || stdinFd < 0 {
		w, r, err := pipe(false)
		if err != nil {
			cleanup(true)
			return nil, fmt.Errorf("pipe: %w", err)
		}
		childFds, parentFiles = append(childFds, r), append(parentFiles, w)
		stdinW, stdinFd = w, r
	}
	attr := &syscall.ProcAttr{
		Dir:   cwd,
		Env:   env,
		Files: []uintptr{uintptr(stdinFd), uintptr(outW), uintptr(errW)},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	}
	if u := m.cfg.User; u != nil {
		// Groups: none (setgroups(0)); the commands' capabilities go with execve (setupPrivileges).
		attr.Sys.Credential = &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid), Groups: []uint32{}}
	}

	m.mu.Lock()
	pid, err := syscall.ForkExec(path, argv, attr)
	if err != nil {
		m.mu.Unlock()
		cleanup(true)
		return nil, badRequest("cannot start %s: %v", argv[0], err)
	}
	p := &Proc{
		m: m, pid: pid, cmd: cmd, cwd: cwd, startedAt: time.Now(), maxOutput: m.cfg.MaxOutput,
		openPipes: 2, pipes: []*os.File{outR, errR}, stdin: stdinW, stdinKept: req.KeepStdin,
		stdinClosed: stdinW == nil, notify: make(chan struct{}),
	}
	m.registerLocked(p, cmd, req.Args)
	m.mu.Unlock()
	cleanup(false)

	if stdinW != nil && (len(stdinData) > 0 || !req.KeepStdin) {
		p.stdinMu.Lock() // taken here so that /stdin calls queue behind the initial data
		go func() {
			defer p.stdinMu.Unlock()
			if len(stdinData) > 0 {
				_, _ = stdinW.Write(stdinData)
			}
			if !req.KeepStdin {
				p.mu.Lock()
				p.closeStdinLocked()
				p.mu.Unlock()
			}
		}()
	}
	go p.readLoop(outR, kindStdout)
	go p.readLoop(errR, kindStderr)
	p.startTimer(req.TimeoutMs)
	return p, nil
}

// registerLocked enters a started process in the table (m.mu held since the fork, so the reaper cannot miss it).
func (m *Manager) registerLocked(p *Proc, cmd *string, args []string) {
	if cmd == nil {
		p.args = append([]string(nil), args...)
	}
	if old := m.procs[p.pid]; old != nil {
		old.closePipes()
	}
	m.procs[p.pid] = p
}

func (p *Proc) startTimer(timeoutMs int64) {
	if timeoutMs > 0 {
		p.mu.Lock()
		if !p.statusKnown {
			p.timer = time.AfterFunc(time.Duration(timeoutMs)*time.Millisecond, p.timeoutFired)
		}
		p.mu.Unlock()
	}
}

// startPty starts a process on a new pseudo-terminal: the slave is its stdin, stdout, stderr and controlling
// terminal (it leads a session of its own), the master is read as its output and written as its stdin.
func (m *Manager) startPty(req *StartRequest, cmd *string, cwd, path string, argv, env []string, stdinData []byte) (*Proc, error) {
	var master *os.File
	slave := -1
	if err := asUser(m.cfg.User, func() error {
		var err error
		master, slave, _, err = openPty(*req.Pty)
		return err
	}); err != nil {
		return nil, fmt.Errorf("cannot open a terminal: %w", err)
	}
	attr := &syscall.ProcAttr{
		Dir:   cwd,
		Env:   env,
		Files: []uintptr{uintptr(slave), uintptr(slave), uintptr(slave)},
		Sys:   &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0},
	}
	if u := m.cfg.User; u != nil {
		attr.Sys.Credential = &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid), Groups: []uint32{}}
	}
	m.mu.Lock()
	pid, err := syscall.ForkExec(path, argv, attr)
	syscall.Close(slave) // the child has its own copies
	if err != nil {
		m.mu.Unlock()
		master.Close()
		return nil, badRequest("cannot start %s: %v", argv[0], err)
	}
	p := &Proc{
		m: m, pid: pid, cmd: cmd, cwd: cwd, startedAt: time.Now(), maxOutput: m.cfg.MaxOutput,
		openPipes: 1, pipes: []*os.File{master}, stdin: master, stdinKept: true, ptmx: master,
		notify: make(chan struct{}),
	}
	m.registerLocked(p, cmd, req.Args)
	m.mu.Unlock()
	if len(stdinData) > 0 {
		p.stdinMu.Lock() // /stdin calls queue behind the initial data
		go func() {
			defer p.stdinMu.Unlock()
			_, _ = master.Write(stdinData)
		}()
	}
	go p.readLoop(master, kindStdout)
	p.startTimer(req.TimeoutMs)
	return p, nil
}

func (p *Proc) readLoop(f *os.File, kind streamKind) {
	buf := make([]byte, readBufSize)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			data := make([]byte, n)
			copy(data, buf[:n])
			p.appendOutput(kind, data)
		}
		if err != nil {
			break
		}
	}
	f.Close()
	p.mu.Lock()
	p.openPipes--
	fin := false
	if p.openPipes == 0 && p.statusKnown && !p.finished {
		if p.graceTimer != nil {
			p.graceTimer.Stop()
		}
		p.finishLocked()
		fin = true
	}
	p.mu.Unlock()
	if fin {
		p.m.prune()
	}
}

func (p *Proc) appendOutput(kind streamKind, data []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.chunks = append(p.chunks, chunk{kind: kind, offset: p.total, data: data})
	p.total += int64(len(data))
	p.kept += int64(len(data))
	for p.kept > p.maxOutput && len(p.chunks) > 0 {
		p.truncated = true
		c := &p.chunks[0]
		excess := p.kept - p.maxOutput
		if int64(len(c.data)) <= excess {
			p.kept -= int64(len(c.data))
			p.chunks[0] = chunk{}
			p.chunks = p.chunks[1:]
		} else {
			c.data = c.data[excess:]
			c.offset += excess
			p.kept -= excess
		}
	}
	p.wakeLocked()
}

func (p *Proc) wakeLocked() {
	if p.notifyUsed {
		close(p.notify)
		p.notify = make(chan struct{})
		p.notifyUsed = false
	}
}

func (p *Proc) finishLocked() {
	p.finished = true
	if p.ptmx != nil && !p.ptyClosed {
		// A background process may still hold the terminal: it gets the hang-up a closed terminal gives.
		p.ptyClosed = true
		p.ptmx.Close()
	}
	p.wakeLocked()
}

func (p *Proc) graceExpired() {
	p.mu.Lock()
	fin := false
	if !p.finished {
		p.finishLocked()
		fin = true
	}
	p.mu.Unlock()
	if fin {
		p.m.prune()
	}
}

func (p *Proc) timeoutFired() {
	p.mu.Lock()
	if p.statusKnown {
		p.mu.Unlock()
		return
	}
	p.timedOut = true
	p.mu.Unlock()
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
}

func (p *Proc) closeStdinLocked() {
	// A terminal's master is also its output: it stays open until the record finishes.
	if p.stdin != nil && !p.stdinClosed && p.ptmx == nil {
		p.stdin.Close()
	}
	p.stdinClosed = true
}

func (p *Proc) closePipes() {
	for _, f := range p.pipes {
		f.Close()
	}
}

// Signal signals the process group.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	finished := p.finished
	p.mu.Unlock()
	if finished {
		return conflict("process %d has exited", p.pid)
	}
	if err := syscall.Kill(-p.pid, sig); err != nil {
		if err == syscall.ESRCH {
			return conflict("process %d has exited", p.pid)
		}
		return err
	}
	return nil
}

// WriteStdin writes data to a kept-open stdin, closing it afterwards when eof. cancel aborts a write
// blocked on a full pipe.
func (p *Proc) WriteStdin(data []byte, eof bool, cancel <-chan struct{}) error {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	p.mu.Lock()
	switch {
	case !p.stdinKept:
		p.mu.Unlock()
		return conflict("stdin of process %d was not kept open (start it with keepStdin)", p.pid)
	case p.statusKnown:
		p.mu.Unlock()
		return conflict("process %d has exited", p.pid)
	case p.stdinClosed:
		p.mu.Unlock()
		return conflict("stdin of process %d is closed", p.pid)
	}
	f := p.stdin
	p.mu.Unlock()
	if eof && p.ptmx != nil {
		// A terminal has no end of input but the end-of-file character (^D) at the start of a line.
		data = append(append([]byte(nil), data...), 4)
		eof = false
	}
	if len(data) > 0 {
		_ = f.SetWriteDeadline(time.Time{})
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-cancel:
				_ = f.SetWriteDeadline(time.Unix(1, 0))
			case <-done:
			}
		}()
		_, err := f.Write(data)
		close(done)
		wg.Wait()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return conflict("stdin write to process %d was cancelled", p.pid)
			}
			return conflict("cannot write to stdin of process %d: %v", p.pid, errors.Unwrap(err))
		}
	}
	if eof {
		p.mu.Lock()
		p.closeStdinLocked()
		p.mu.Unlock()
	}
	return nil
}

// Get returns the record for pid, or nil.
func (m *Manager) Get(pid int) *Proc {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.procs[pid]
}

// prune drops the oldest finished records beyond MaxFinished.
func (m *Manager) prune() {
	m.mu.Lock()
	defer m.mu.Unlock()
	type fin struct {
		p   *Proc
		end time.Time
	}
	var done []fin
	for _, p := range m.procs {
		p.mu.Lock()
		if p.finished {
			done = append(done, fin{p, p.endedAt})
		}
		p.mu.Unlock()
	}
	if len(done) <= m.cfg.MaxFinished {
		return
	}
	sort.Slice(done, func(i, j int) bool { return done[i].end.Before(done[j].end) })
	for _, f := range done[:len(done)-m.cfg.MaxFinished] {
		delete(m.procs, f.p.pid)
		f.p.closePipes()
	}
}

// ProcessInfo is the JSON form of a process record.
type ProcessInfo struct {
	Pid         int      `json:"pid"`
	Cmd         *string  `json:"cmd"`
	Args        []string `json:"args"`
	Cwd         string   `json:"cwd"`
	Running     bool     `json:"running"`
	ExitCode    *int     `json:"exitCode"`
	Signal      *string  `json:"signal"`
	TimedOut    bool     `json:"timedOut"`
	StartedAt   string   `json:"startedAt"`
	EndedAt     *string  `json:"endedAt"`
	OutputBytes int64    `json:"outputBytes"`
	Truncated   bool     `json:"truncated"`
	StdinOpen   bool     `json:"stdinOpen"`
	Pty         bool     `json:"pty"`
}

func (p *Proc) exitStatusLocked() (code *int, sig *string) {
	if !p.finished {
		return nil, nil
	}
	if p.status.Signaled() {
		s := signalName(p.status.Signal())
		return nil, &s
	}
	c := p.status.ExitStatus()
	return &c, nil
}

// Info snapshots the record.
func (p *Proc) Info() ProcessInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.infoLocked()
}

func (p *Proc) infoLocked() ProcessInfo {
	info := ProcessInfo{
		Pid: p.pid, Cmd: p.cmd, Args: p.args, Cwd: p.cwd, Running: !p.finished, TimedOut: p.timedOut,
		StartedAt: fmtTime(p.startedAt), OutputBytes: p.total, Truncated: p.truncated,
		StdinOpen: p.stdinKept && !p.stdinClosed, Pty: p.ptmx != nil,
	}
	info.ExitCode, info.Signal = p.exitStatusLocked()
	if p.finished {
		e := fmtTime(p.endedAt)
		info.EndedAt = &e
	}
	return info
}

// List returns running processes first (newest first), then finished ones (newest end first).
func (m *Manager) List() []ProcessInfo {
	m.mu.Lock()
	procs := make([]*Proc, 0, len(m.procs))
	for _, p := range m.procs {
		procs = append(procs, p)
	}
	m.mu.Unlock()
	type row struct {
		info ProcessInfo
		end  time.Time
	}
	rows := make([]row, 0, len(procs))
	for _, p := range procs {
		p.mu.Lock()
		rows = append(rows, row{p.infoLocked(), p.endedAt})
		p.mu.Unlock()
	}
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.info.Running != b.info.Running {
			return a.info.Running
		}
		if a.info.Running {
			if a.info.StartedAt != b.info.StartedAt {
				return a.info.StartedAt > b.info.StartedAt
			}
			return a.info.Pid > b.info.Pid
		}
		if !a.end.Equal(b.end) {
			return a.end.After(b.end)
		}
		return a.info.Pid > b.info.Pid
	})
	out := make([]ProcessInfo, len(rows))
	for i, r := range rows {
		out[i] = r.info
	}
	return out
}

// chunksFrom returns the kept chunks covering offsets >= cursor; a chunk straddling cursor is cut.
func (p *Proc) chunksFromLocked(cursor int64) []chunk {
	i := sort.Search(len(p.chunks), func(i int) bool {
		c := p.chunks[i]
		return c.offset+int64(len(c.data)) > cursor
	})
	if i == len(p.chunks) {
		return nil
	}
	out := make([]chunk, len(p.chunks)-i)
	copy(out, p.chunks[i:])
	if out[0].offset < cursor {
		out[0].data = out[0].data[cursor-out[0].offset:]
		out[0].offset = cursor
	}
	return out
}

// Shutdown signals every process group, waits up to grace, kills what is left.
func (m *Manager) Shutdown(grace time.Duration) {
	pid1 := os.Getpid() == 1
	m.signalAll(syscall.SIGTERM)
	if pid1 {
		_ = syscall.Kill(-1, syscall.SIGTERM)
	}
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if m.allGone(pid1) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	m.signalAll(syscall.SIGKILL)
	if pid1 {
		_ = syscall.Kill(-1, syscall.SIGKILL)
	}
}

func (m *Manager) signalAll(sig syscall.Signal) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for pid, p := range m.procs {
		p.mu.Lock()
		fin := p.finished
		p.mu.Unlock()
		if !fin {
			_ = syscall.Kill(-pid, sig)
		}
	}
}

func (m *Manager) allGone(pid1 bool) bool {
	if pid1 {
		// In our pid namespace every other process is a descendant; ESRCH means none is left.
		return syscall.Kill(-1, 0) == syscall.ESRCH
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.procs {
		p.mu.Lock()
		known := p.statusKnown
		p.mu.Unlock()
		if !known {
			return false
		}
	}
	return true
}

var signalNames = [...]string{
	1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS",
	8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE", 14: "SIGALRM",
	15: "SIGTERM", 16: "SIGSTKFLT", 17: "SIGCHLD", 18: "SIGCONT", 19: "SIGSTOP", 20: "SIGTSTP",
	21: "SIGTTIN", 22: "SIGTTOU", 23: "SIGURG", 24: "SIGXCPU", 25: "SIGXFSZ", 26: "SIGVTALRM",
	27: "SIGPROF", 28: "SIGWINCH", 29: "SIGIO", 30: "SIGPWR", 31: "SIGSYS",
}

func signalName(s syscall.Signal) string {
	if int(s) > 0 && int(s) < len(signalNames) && signalNames[s] != "" {
		return signalNames[s]
	}
	return fmt.Sprintf("SIG%d", int(s))
}

// allowedSignals are the signals POST /processes/{pid}/signal accepts.
var allowedSignals = map[string]syscall.Signal{
	"SIGTERM": syscall.SIGTERM, "SIGKILL": syscall.SIGKILL, "SIGINT": syscall.SIGINT,
	"SIGHUP": syscall.SIGHUP, "SIGUSR1": syscall.SIGUSR1, "SIGUSR2": syscall.SIGUSR2,
	"SIGQUIT": syscall.SIGQUIT,
}

func parseSignal(name string) (syscall.Signal, bool) {
	n := strings.ToUpper(strings.TrimSpace(name))
	if !strings.HasPrefix(n, "SIG") {
		n = "SIG" + n
	}
	s, ok := allowedSignals[n]
	return s, ok
}

func fmtTime(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

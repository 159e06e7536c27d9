package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	testMgr    *Manager
	testSock   string
	testClient *http.Client
)

func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
}

func TestMain(m *testing.M) {
	if os.Getenv("HANGAR_AGENT_HELPER") == "1" {
		// Re-executed by TestShutdown as the agent binary itself.
		os.Exit(run(os.Args[1:]))
	}
	dir, err := os.MkdirTemp("", "hangar-agent-test")
	if err != nil {
		panic(err)
	}
	testSock = filepath.Join(dir, "agent.sock")
	testMgr = NewManager(Config{MaxOutput: 1 << 20, MaxFinished: 200})
	l, err := net.Listen("unix", testSock)
	if err != nil {
		panic(err)
	}
	go func() { _ = (&http.Server{Handler: NewServer(testMgr)}).Serve(l) }()
	testClient = unixClient(testSock)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func doReq(t *testing.T, c *http.Client, method, path string, body interface{}) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, "http://agent"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

func do(t *testing.T, method, path string, body interface{}) (int, []byte) {
	t.Helper()
	return doReq(t, testClient, method, path, body)
}

func expectStatus(t *testing.T, method, path string, body interface{}, want int) []byte {
	t.Helper()
	st, out := do(t, method, path, body)
	if st != want {
		t.Fatalf("%s %s: status %d, want %d: %s", method, path, st, want, out)
	}
	return out
}

func expectError(t *testing.T, method, path string, body interface{}, status int, code string) {
	t.Helper()
	out := expectStatus(t, method, path, body, status)
	var e struct {
		Error apiError `json:"error"`
	}
	if err := json.Unmarshal(out, &e); err != nil || e.Error.Code != code || e.Error.Message == "" {
		t.Fatalf("%s %s: want error code %q, got %s", method, path, code, out)
	}
}

func start(t *testing.T, req map[string]interface{}) int {
	t.Helper()
	out := expectStatus(t, "POST", "/processes", req, 201)
	var r struct {
		Pid       int    `json:"pid"`
		StartedAt string `json:"startedAt"`
	}
	if err := json.Unmarshal(out, &r); err != nil || r.Pid <= 0 || r.StartedAt == "" {
		t.Fatalf("bad start response %s", out)
	}
	return r.Pid
}

type outLine struct {
	Type       string  `json:"type"`
	Data       string  `json:"data"`
	Offset     int64   `json:"offset"`
	ExitCode   *int    `json:"exitCode"`
	Signal     *string `json:"signal"`
	TimedOut   bool    `json:"timedOut"`
	DurationMs int64   `json:"durationMs"`
	Truncated  bool    `json:"truncated"`
	at         time.Time
}

func (l outLine) bytes(t *testing.T) []byte {
	b, err := base64.StdEncoding.DecodeString(l.Data)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type output struct {
	lines  []outLine
	stdout string
	stderr string
	exit   *outLine
}

func readOutput(t *testing.T, pid int, query string) output {
	t.Helper()
	resp, err := testClient.Get(fmt.Sprintf("http://agent/processes/%d/output%s", pid, query))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("output: status %d type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var o output
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var l outLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("bad line %q: %v", sc.Text(), err)
		}
		l.at = time.Now()
		if o.exit != nil {
			t.Fatalf("line after exit: %s", sc.Text())
		}
		switch l.Type {
		case "stdout":
			o.stdout += string(l.bytes(t))
		case "stderr":
			o.stderr += string(l.bytes(t))
		case "exit":
			l := l
			o.exit = &l
		default:
			t.Fatalf("unknown line type %q", l.Type)
		}
		o.lines = append(o.lines, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return o
}

func runToEnd(t *testing.T, req map[string]interface{}) output {
	t.Helper()
	pid := start(t, req)
	o := readOutput(t, pid, "?follow=1")
	if o.exit == nil {
		t.Fatalf("no exit line for %v", req)
	}
	return o
}

func getProc(t *testing.T, pid int) ProcessInfo {
	t.Helper()
	out := expectStatus(t, "GET", fmt.Sprintf("/processes/%d", pid), nil, 200)
	var p ProcessInfo
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func TestHealth(t *testing.T) {
	out := expectStatus(t, "GET", "/health", nil, 200)
	var h struct {
		OK        bool   `json:"ok"`
		Pid       int    `json:"pid"`
		StartedAt string `json:"startedAt"`
	}
	if err := json.Unmarshal(out, &h); err != nil || !h.OK || h.Pid != os.Getpid() {
		t.Fatalf("health %s", out)
	}
	if _, err := time.Parse(time.RFC3339, h.StartedAt); err != nil {
		t.Fatal(err)
	}
	expectError(t, "GET", "/nope", nil, 404, "not_found")
	expectError(t, "DELETE", "/processes", nil, 405, "method_not_allowed")
}

func TestExitCodeAndStreams(t *testing.T) {
	o := runToEnd(t, map[string]interface{}{"cmd": "echo hi; echo err >&2; exit 3"})
	if o.stdout != "hi\n" || o.stderr != "err\n" {
		t.Fatalf("stdout %q stderr %q", o.stdout, o.stderr)
	}
	if o.exit.ExitCode == nil || *o.exit.ExitCode != 3 || o.exit.Signal != nil || o.exit.TimedOut {
		t.Fatalf("exit %+v", o.exit)
	}
	// offsets are contiguous in the combined stream
	var next int64
	for _, l := range o.lines[:len(o.lines)-1] {
		if l.Offset != next {
			t.Fatalf("offset %d, want %d", l.Offset, next)
		}
		next += int64(len(l.bytes(t)))
	}
}

func TestArgsEnvCwd(t *testing.T) {
	o := runToEnd(t, map[string]interface{}{"args": []string{"echo", "a  b", "$HOME"}})
	if o.stdout != "a  b $HOME\n" {
		t.Fatalf("args form: %q", o.stdout)
	}
	dir := t.TempDir()
	o = runToEnd(t, map[string]interface{}{"cmd": "echo $FOO; pwd", "env": map[string]string{"FOO": "bar"}, "cwd": dir})
	if o.stdout != "bar\n"+dir+"\n" {
		t.Fatalf("env/cwd: %q", o.stdout)
	}
	o = runToEnd(t, map[string]interface{}{"cmd": "pwd"})
	home, _ := os.UserHomeDir()
	if st, err := os.Stat(home); err != nil || !st.IsDir() {
		home = "/"
	}
	if o.stdout != home+"\n" {
		t.Fatalf("default cwd %q, want %q", o.stdout, home)
	}
	o = runToEnd(t, map[string]interface{}{"cmd": "env"})
	if strings.Contains(o.stdout, "HANGAR_AGENT_") {
		t.Fatal("agent configuration leaked into the command environment")
	}
}

func TestStartErrors(t *testing.T) {
	expectError(t, "POST", "/processes", map[string]interface{}{}, 400, "bad_request")
	expectError(t, "POST", "/processes", map[string]interface{}{"args": []string{"no-such-command-xyz"}}, 400, "bad_request")
	expectError(t, "POST", "/processes", map[string]interface{}{"cmd": "true", "cwd": "/no/such/dir"}, 400, "bad_request")
	expectError(t, "POST", "/processes", map[string]interface{}{"cmd": "true", "stdin": "!!!"}, 400, "bad_request")
	expectError(t, "POST", "/processes", []byte("{not json"), 400, "bad_request")
	expectError(t, "GET", "/processes/999999999", nil, 404, "not_found")
	expectError(t, "GET", "/processes/abc/output", nil, 404, "not_found")
}

func TestStdin(t *testing.T) {
	o := runToEnd(t, map[string]interface{}{"cmd": "cat; echo done", "stdin": b64("hello\n")})
	if o.stdout != "hello\ndone\n" {
		t.Fatalf("stdin: %q", o.stdout)
	}
	// no stdin: /dev/null, cat ends immediately
	o = runToEnd(t, map[string]interface{}{"cmd": "cat; echo done"})
	if o.stdout != "done\n" {
		t.Fatalf("null stdin: %q", o.stdout)
	}
}

func TestKeepStdin(t *testing.T) {
	pid := start(t, map[string]interface{}{"cmd": "cat", "keepStdin": true, "stdin": b64("first\n")})
	p := fmt.Sprintf("/processes/%d", pid)
	if !getProc(t, pid).StdinOpen {
		t.Fatal("stdinOpen false")
	}
	expectStatus(t, "POST", p+"/stdin", map[string]interface{}{"data": b64("abc\n")}, 204)
	expectStatus(t, "POST", p+"/stdin", map[string]interface{}{"data": b64("def\n"), "eof": true}, 204)
	o := readOutput(t, pid, "?follow=1")
	if o.stdout != "first\nabc\ndef\n" || o.exit == nil || *o.exit.ExitCode != 0 {
		t.Fatalf("keepStdin: %q %+v", o.stdout, o.exit)
	}
	expectError(t, "POST", p+"/stdin", map[string]interface{}{"data": b64("x")}, 409, "conflict")

	pid = start(t, map[string]interface{}{"cmd": "sleep 5"})
	expectError(t, "POST", fmt.Sprintf("/processes/%d/stdin", pid), map[string]interface{}{"data": b64("x")}, 409, "conflict")
	expectStatus(t, "POST", fmt.Sprintf("/processes/%d/signal", pid), map[string]string{"signal": "SIGKILL"}, 204)
	readOutput(t, pid, "?follow=1")
}

func TestTimeout(t *testing.T) {
	t0 := time.Now()
	o := runToEnd(t, map[string]interface{}{"cmd": "echo start; sleep 10", "timeoutMs": 200})
	if el := time.Since(t0); el > 3*time.Second {
		t.Fatalf("timeout took %v", el)
	}
	if !o.exit.TimedOut || o.exit.Signal == nil || *o.exit.Signal != "SIGKILL" || o.exit.ExitCode != nil {
		t.Fatalf("timeout exit %+v", o.exit)
	}
	if o.stdout != "start\n" || o.exit.DurationMs < 150 {
		t.Fatalf("stdout %q duration %d", o.stdout, o.exit.DurationMs)
	}
}

func TestSignal(t *testing.T) {
	pid := start(t, map[string]interface{}{"cmd": "sleep 100"})
	sp := fmt.Sprintf("/processes/%d/signal", pid)
	expectError(t, "POST", sp, map[string]string{"signal": "SIGWHAT"}, 400, "bad_request")
	expectStatus(t, "POST", sp, map[string]string{"signal": "SIGTERM"}, 204)
	o := readOutput(t, pid, "?follow=1")
	if o.exit.Signal == nil || *o.exit.Signal != "SIGTERM" || o.exit.TimedOut {
		t.Fatalf("signal exit %+v", o.exit)
	}
	expectError(t, "POST", sp, map[string]string{"signal": "SIGTERM"}, 409, "conflict")

	// the whole group is signalled: a shell with a child
	pid = start(t, map[string]interface{}{"cmd": "sleep 100; echo never"})
	time.Sleep(50 * time.Millisecond)
	expectStatus(t, "POST", fmt.Sprintf("/processes/%d/signal", pid), map[string]string{"signal": "SIGINT"}, 204)
	o = readOutput(t, pid, "?follow=1")
	if o.stdout != "" || o.exit == nil {
		t.Fatalf("group signal: %q %+v", o.stdout, o.exit)
	}
}

func TestListRunningThenFinished(t *testing.T) {
	pid := start(t, map[string]interface{}{"cmd": "sleep 0.3"})
	out := expectStatus(t, "GET", "/processes", nil, 200)
	var l struct {
		Processes []ProcessInfo `json:"processes"`
	}
	if err := json.Unmarshal(out, &l); err != nil {
		t.Fatal(err)
	}
	found := false
	seenFinished := false
	for _, p := range l.Processes {
		if !p.Running {
			seenFinished = true
		} else if seenFinished {
			t.Fatal("running process listed after a finished one")
		}
		if p.Pid == pid {
			found = true
			if !p.Running || p.ExitCode != nil || p.EndedAt != nil || *p.Cmd != "sleep 0.3" || p.Args != nil {
				t.Fatalf("running record %+v", p)
			}
		}
	}
	if !found {
		t.Fatal("process not listed")
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		p := getProc(t, pid)
		if !p.Running {
			if p.ExitCode == nil || *p.ExitCode != 0 || p.EndedAt == nil {
				t.Fatalf("finished record %+v", p)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("still running")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestReplayAfter(t *testing.T) {
	pid := start(t, map[string]interface{}{"cmd": "printf abc; sleep 0.05; printf def >&2; sleep 0.05; printf ghi"})
	full := readOutput(t, pid, "?follow=1")
	if full.stdout+full.stderr != "abcghidef" || full.exit == nil {
		t.Fatalf("full %q %q", full.stdout, full.stderr)
	}
	o := readOutput(t, pid, "?after=3")
	if o.stdout != "ghi" || o.stderr != "def" || o.exit == nil {
		t.Fatalf("after=3: %q %q", o.stdout, o.stderr)
	}
	if o.lines[0].Offset != 3 || o.lines[0].Type != "stderr" {
		t.Fatalf("after=3 first line %+v", o.lines[0])
	}
	o = readOutput(t, pid, "?after=4") // mid-chunk: the rest of that chunk
	if o.stderr != "ef" || o.lines[0].Offset != 4 {
		t.Fatalf("after=4: %+v", o.lines)
	}
	o = readOutput(t, pid, "?after=9")
	if len(o.lines) != 1 || o.exit == nil {
		t.Fatalf("after=9: %+v", o.lines)
	}
	st, _ := do(t, "GET", fmt.Sprintf("/processes/%d/output?after=-1", pid), nil)
	if st != 400 {
		t.Fatalf("after=-1: %d", st)
	}
}

func TestFollowLive(t *testing.T) {
	pid := start(t, map[string]interface{}{"cmd": "echo 1; sleep 0.3; echo 2"})
	o := readOutput(t, pid, "?follow=1")
	if o.stdout != "1\n2\n" || o.exit == nil || len(o.lines) != 3 {
		t.Fatalf("follow: %+v", o.lines)
	}
	if gap := o.lines[2].at.Sub(o.lines[0].at); gap < 200*time.Millisecond {
		t.Fatalf("first line not delivered live (gap %v)", gap)
	}
	// follow=0 on a running process: buffered chunks, no exit line, response ends
	pid = start(t, map[string]interface{}{"cmd": "echo x; sleep 0.3"})
	time.Sleep(100 * time.Millisecond)
	o = readOutput(t, pid, "")
	if o.stdout != "x\n" || o.exit != nil {
		t.Fatalf("follow=0 running: %+v", o.lines)
	}
	readOutput(t, pid, "?follow=1")
}

func TestFollowDisconnect(t *testing.T) {
	pid := start(t, map[string]interface{}{"cmd": "sleep 1"})
	time.Sleep(20 * time.Millisecond)
	before := runtime.NumGoroutine()
	var cancels []context.CancelFunc
	var bodies []io.Closer
	for i := 0; i < 20; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://agent/processes/%d/output?follow=1", pid), nil)
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		cancels = append(cancels, cancel)
		bodies = append(bodies, resp.Body)
	}
	for i := range cancels {
		cancels[i]()
		bodies[i].Close()
	}
	testClient.Transport.(*http.Transport).CloseIdleConnections()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before+2 {
		if time.Now().After(deadline) {
			t.Fatalf("goroutines: %d before, %d after disconnect", before, runtime.NumGoroutine())
		}
		time.Sleep(20 * time.Millisecond)
	}
	expectStatus(t, "POST", fmt.Sprintf("/processes/%d/signal", pid), map[string]string{"signal": "SIGKILL"}, 204)
	readOutput(t, pid, "?follow=1")
}

func TestTruncation(t *testing.T) {
	testMgr.setMaxOutput(1000)
	pid := start(t, map[string]interface{}{"cmd": "for i in $(seq 1 500); do echo 123456789; done"})
	testMgr.setMaxOutput(1 << 20)
	readOutput(t, pid, "?follow=1") // a live follower sees everything; wait for the end
	o := readOutput(t, pid, "")     // the replay holds only what the cap kept
	if o.exit == nil || !o.exit.Truncated {
		t.Fatalf("not truncated: %+v", o.exit)
	}
	if len(o.stdout) > 1000 || len(o.stdout) == 0 || !strings.HasSuffix(o.stdout, "123456789\n") {
		t.Fatalf("kept %d bytes", len(o.stdout))
	}
	last := o.lines[len(o.lines)-2]
	if end := last.Offset + int64(len(last.bytes(t))); end != 5000 {
		t.Fatalf("end offset %d", end)
	}
	if o.lines[0].Offset < 4000 {
		t.Fatalf("first kept offset %d", o.lines[0].Offset)
	}
	p := getProc(t, pid)
	if p.OutputBytes != 5000 || !p.Truncated {
		t.Fatalf("record %+v", p)
	}
	// a large output at the default cap is kept whole and in order
	o = runToEnd(t, map[string]interface{}{"cmd": "seq 1 100000"})
	var want strings.Builder
	for i := 1; i <= 100000; i++ {
		want.WriteString(strconv.Itoa(i) + "\n")
	}
	if o.stdout != want.String() || o.exit.Truncated {
		t.Fatalf("seq output mismatch (%d bytes)", len(o.stdout))
	}
}

func TestOrphanReaping(t *testing.T) {
	o := runToEnd(t, map[string]interface{}{"cmd": "sh -c 'sleep 0.1 & echo $!; exit 0'"})
	if o.exit.ExitCode == nil || *o.exit.ExitCode != 0 {
		t.Fatalf("exit %+v", o.exit)
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(o.stdout))
	if err != nil {
		t.Fatalf("stdout %q", o.stdout)
	}
	// an orphan holding stdout open forever: the record still finishes after the grace period
	t0 := time.Now()
	o = runToEnd(t, map[string]interface{}{"cmd": "sleep 1 & exit 4"})
	if *o.exit.ExitCode != 4 || time.Since(t0) > 900*time.Millisecond {
		t.Fatalf("background holder: %+v after %v", o.exit, time.Since(t0))
	}
	// many concurrent short processes each get their own status
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for i := 0; i < 40; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			cmd := fmt.Sprintf("(sleep 0.0%d &) ; exit %d", i%10, i)
			if i%2 == 0 {
				cmd = fmt.Sprintf("exit %d", i)
			}
			o := runToEnd(t, map[string]interface{}{"cmd": cmd})
			if o.exit.ExitCode == nil || *o.exit.ExitCode != i {
				errs <- fmt.Sprintf("process %d: %+v", i, o.exit)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	// the orphan was reaped (no zombie left behind)
	deadline := time.Now().Add(2 * time.Second)
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", orphan)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", orphan))
			t.Fatalf("orphan %d not reaped: %s", orphan, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStartLatency(t *testing.T) {
	var ds []time.Duration
	for i := 0; i < 20; i++ {
		t0 := time.Now()
		o := runToEnd(t, map[string]interface{}{"args": []string{"echo", "x"}})
		ds = append(ds, time.Since(t0))
		if o.stdout != "x\n" {
			t.Fatal(o.stdout)
		}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	t.Logf("start+output+exit round trip: median %v, max %v", ds[len(ds)/2], ds[len(ds)-1])
	if ds[len(ds)/2] > 50*time.Millisecond {
		t.Fatalf("median round trip %v", ds[len(ds)/2])
	}
}

type entryResp struct {
	Entry   *Entry  `json:"entry"`
	Entries []Entry `json:"entries"`
}

func TestFiles(t *testing.T) {
	dir := t.TempDir()
	q := func(p string) string { return "?path=" + p }
	f := dir + "/a/b/hello.txt"

	out := expectStatus(t, "PUT", "/files/content"+q(f), []byte("hello world"), 200)
	var er entryResp
	json.Unmarshal(out, &er)
	if er.Entry == nil || er.Entry.Type != "file" || er.Entry.Size != 11 || er.Entry.Mode != "0644" || er.Entry.Name != "hello.txt" || er.Entry.Path != f {
		t.Fatalf("put entry %s", out)
	}
	st, body := do(t, "GET", "/files/content"+q(f), nil)
	if st != 200 || string(body) != "hello world" {
		t.Fatalf("get content %d %q", st, body)
	}
	// overwrite preserves mode
	os.Chmod(f, 0o600)
	out = expectStatus(t, "PUT", "/files/content"+q(f), []byte("v2"), 200)
	json.Unmarshal(out, &er)
	if er.Entry.Mode != "0600" || er.Entry.Size != 2 {
		t.Fatalf("overwrite entry %s", out)
	}
	if b, _ := os.ReadFile(f); string(b) != "v2" {
		t.Fatalf("content %q", b)
	}

	// list
	expectStatus(t, "PUT", "/files/content"+q(dir+"/a/b/c.txt"), []byte(""), 200)
	os.Symlink("hello.txt", dir+"/a/b/link")
	out = expectStatus(t, "GET", "/files"+q(dir+"/a/b/"), nil, 200)
	er = entryResp{}
	json.Unmarshal(out, &er)
	if er.Entry != nil || len(er.Entries) != 3 || er.Entries[0].Name != "c.txt" || er.Entries[1].Name != "hello.txt" ||
		er.Entries[2].Type != "symlink" || er.Entries[0].Path != dir+"/a/b/c.txt" {
		t.Fatalf("list %s", out)
	}
	if _, err := time.Parse(time.RFC3339, er.Entries[0].Mtime); err != nil {
		t.Fatal(err)
	}
	out = expectStatus(t, "GET", "/files"+q(f), nil, 200)
	er = entryResp{}
	json.Unmarshal(out, &er)
	if er.Entry == nil || er.Entries != nil || er.Entry.Type != "file" {
		t.Fatalf("stat file %s", out)
	}

	// mkdir
	out = expectStatus(t, "POST", "/files/mkdir", map[string]interface{}{"path": dir + "/x/y", "parents": true}, 201)
	json.Unmarshal(out, &er)
	if er.Entry.Type != "dir" || er.Entry.Path != dir+"/x/y" {
		t.Fatalf("mkdir %s", out)
	}
	expectStatus(t, "POST", "/files/mkdir", map[string]interface{}{"path": dir + "/x/y", "parents": true}, 200)
	expectError(t, "POST", "/files/mkdir", map[string]interface{}{"path": dir + "/x/y"}, 409, "already_exists")
	expectError(t, "POST", "/files/mkdir", map[string]interface{}{"path": f, "parents": true}, 409, "already_exists")
	expectError(t, "POST", "/files/mkdir", map[string]interface{}{"path": dir + "/nope/z"}, 404, "not_found")

	// move
	out = expectStatus(t, "POST", "/files/move", map[string]string{"from": f, "to": dir + "/x/moved.txt"}, 200)
	json.Unmarshal(out, &er)
	if er.Entry.Path != dir+"/x/moved.txt" || er.Entry.Size != 2 {
		t.Fatalf("move %s", out)
	}
	expectError(t, "POST", "/files/move", map[string]string{"from": dir + "/a/b/c.txt", "to": dir + "/x/moved.txt"}, 409, "already_exists")
	expectError(t, "POST", "/files/move", map[string]string{"from": dir + "/missing", "to": dir + "/m2"}, 404, "not_found")
	expectError(t, "POST", "/files/move", map[string]string{"from": dir + "/x", "to": dir + "/x/y/z"}, 400, "bad_request")

	// delete
	expectError(t, "DELETE", "/files"+q(dir+"/x"), nil, 409, "conflict")
	expectStatus(t, "DELETE", "/files"+q(dir+"/x/moved.txt"), nil, 204)
	expectStatus(t, "DELETE", "/files"+q(dir+"/a")+"&recursive=1", nil, 204)
	if _, err := os.Stat(dir + "/a"); !os.IsNotExist(err) {
		t.Fatal("recursive delete left the directory")
	}
	expectError(t, "DELETE", "/files"+q(dir+"/a"), nil, 404, "not_found")
	expectError(t, "DELETE", "/files"+q("/"), nil, 400, "bad_request")

	// errors
	expectError(t, "GET", "/files"+q("relative/path"), nil, 400, "bad_request")
	expectError(t, "GET", "/files", nil, 400, "bad_request")
	expectError(t, "GET", "/files"+q(dir+"/missing"), nil, 404, "not_found")
	expectError(t, "GET", "/files/content"+q(dir+"/missing"), nil, 404, "not_found")
	expectError(t, "GET", "/files/content"+q(dir), nil, 400, "is_a_directory")
	expectError(t, "PUT", "/files/content"+q(dir+"/x"), []byte("x"), 400, "is_a_directory")
	expectError(t, "GET", "/files"+q(dir+"/%00x"), nil, 400, "bad_request")
	expectStatus(t, "PUT", "/files/content"+q(dir+"/plain"), []byte("x"), 200)
	expectError(t, "PUT", "/files/content"+q(dir+"/plain/sub"), []byte("x"), 400, "not_a_directory")
	if os.Geteuid() != 0 {
		os.Mkdir(dir+"/ro", 0o500)
		expectError(t, "PUT", "/files/content"+q(dir+"/ro/f"), []byte("x"), 403, "permission_denied")
	}
	// no temp files left behind
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		if strings.Contains(de.Name(), ".hangar-") {
			t.Fatalf("temp file left: %s", de.Name())
		}
	}
}

// TestShutdown runs the test binary as the agent (-listen), starts a process in it, sends the agent
// SIGTERM and checks that it exits 0 after terminating its process.
func TestShutdown(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "child.sock")
	agent := start(t, map[string]interface{}{
		"args": []string{os.Args[0], "-listen", sock}, "env": map[string]string{"HANGAR_AGENT_HELPER": "1"},
	})
	c := unixClient(sock)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("child agent did not listen")
		}
		time.Sleep(10 * time.Millisecond)
	}
	st, out := doReq(t, c, "POST", "/processes", map[string]interface{}{"cmd": "trap '' TERM; echo ready; sleep 100"})
	if st != 201 {
		t.Fatalf("start in child agent: %d %s", st, out)
	}
	var r struct{ Pid int }
	json.Unmarshal(out, &r)
	for { // wait until the trap is installed
		_, out = doReq(t, c, "GET", fmt.Sprintf("/processes/%d", r.Pid), nil)
		var p ProcessInfo
		json.Unmarshal(out, &p)
		if p.OutputBytes > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("child process never got ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t0 := time.Now()
	if err := syscall.Kill(agent, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	o := readOutput(t, agent, "?follow=1")
	if o.exit.ExitCode == nil || *o.exit.ExitCode != 0 {
		t.Fatalf("agent exit %+v (stderr %q)", o.exit, o.stderr)
	}
	if el := time.Since(t0); el < 1500*time.Millisecond || el > 4*time.Second {
		t.Fatalf("shutdown took %v (expected the 2 s grace before SIGKILL); stderr %q stdout %q", el, o.stderr, o.stdout)
	}
	if err := syscall.Kill(r.Pid, 0); err == nil {
		time.Sleep(300 * time.Millisecond)
		if err := syscall.Kill(r.Pid, 0); err == nil {
			t.Fatalf("process %d survived the agent shutdown", r.Pid)
		}
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatal("socket not removed")
	}
}

// TestSetBaseEnv runs a fresh agent (the test binary, -listen) and sets its base environment before any
// process: commands see exactly that environment; a second PUT, and a PUT to an agent that has started a
// process (the shared test agent), answer 409.
func TestSetBaseEnv(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "env.sock")
	agent := start(t, map[string]interface{}{
		"args": []string{os.Args[0], "-listen", sock}, "env": map[string]string{"HANGAR_AGENT_HELPER": "1", "LEFTOVER": "old"},
	})
	defer func() { _ = syscall.Kill(agent, syscall.SIGKILL) }()
	c := unixClient(sock)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("child agent did not listen")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st, out := doReq(t, c, "PUT", "/env", map[string]interface{}{"env": map[string]string{"A=B": "x"}}); st != 400 {
		t.Fatalf("invalid name: %d %s", st, out)
	}
	if st, out := doReq(t, c, "PUT", "/env", map[string]interface{}{"env": map[string]string{"PATH": "/usr/bin:/bin", "FOO": "claimed"}}); st != 204 {
		t.Fatalf("set env: %d %s", st, out)
	}
	if st, _ := doReq(t, c, "PUT", "/env", map[string]interface{}{"env": map[string]string{"FOO": "again"}}); st != 409 {
		t.Fatalf("second set env: %d, want 409", st)
	}
	st, out := doReq(t, c, "POST", "/processes", map[string]interface{}{"cmd": "echo $FOO ${LEFTOVER-none}"})
	if st != 201 {
		t.Fatalf("start in child agent: %d %s", st, out)
	}
	var r struct{ Pid int }
	_ = json.Unmarshal(out, &r)
	for {
		_, out = doReq(t, c, "GET", fmt.Sprintf("/processes/%d/output", r.Pid), nil)
		if strings.Contains(string(out), `"exit"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child process did not finish: %s", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(string(out), b64("claimed none\n")) {
		t.Fatalf("command environment: %s", out)
	}
	expectError(t, "PUT", "/env", map[string]interface{}{"env": map[string]string{"FOO": "late"}}, 409, "conflict")
}

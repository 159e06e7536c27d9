package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// procStatus reads the named lines of /proc/PID/status.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		out[k] = strings.TrimSpace(v)
	}
	return out
}

// TestUserSeparation runs the agent as its own uid with the capabilities runc gives it (ambient included),
// commands as another uid: they end with no capability, cannot signal the agent, and file operations act
// with the user's rights.
func TestUserSeparation(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start the agent as another uid")
	}
	const agentUID, userUID = 345_678, 245_678
	dir, err := os.MkdirTemp("", "hangar-agent-privs")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	// The agent as scripts/setup.sh builds it: without cgo (AllThreadsSyscall refuses to run with it).
	bin := filepath.Join(dir, "agent")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOPROXY=off", "GOFLAGS=-mod=mod")
	// The test's Manager is a subreaper whose reaper waits for any child: it can take go build's exit status
	// before exec does (ECHILD). The binary is written at the end of a successful build, so it tells.
	if out, err := build.CombinedOutput(); err != nil {
		if fi, serr := os.Stat(bin); !errors.Is(err, syscall.ECHILD) || serr != nil || fi.Size() == 0 {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	os.Chmod(bin, 0o755)
	run := filepath.Join(dir, "run")
	home := filepath.Join(dir, "home")
	os.Mkdir(run, 0o700)
	os.Chown(run, agentUID, agentUID)
	os.Mkdir(home, 0o755)
	os.Chown(home, userUID, userUID)
	os.WriteFile(filepath.Join(dir, "rootonly"), []byte("secret"), 0o600)
	sock := filepath.Join(run, "agent.sock")

	cmd := exec.Command(bin, "-listen", sock)
	cmd.Env = []string{"HANGAR_AGENT_UID=245678", "HANGAR_AGENT_GID=245678", "HOME=" + home, "PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: agentUID, Gid: agentUID, Groups: []uint32{}},
		AmbientCaps: []uintptr{capSetuid, capSetgid, capKill, capSetpcap},
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent did not listen; stderr %q", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	c := unixClient(sock)
	for { // the socket is there before the agent has set up its privileges: wait for an answer
		if resp, err := c.Get("http://agent/health"); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent does not answer; stderr %q", stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The agent: its own uid, only SETUID/SETGID/KILL, nothing inheritable, ambient or in the bounding set.
	st := procStatus(t, cmd.Process.Pid)
	if st["Uid"] != "345678\t345678\t345678\t345678" {
		t.Fatalf("agent uid %q", st["Uid"])
	}
	want := map[string]string{"CapEff": "00000000000000e0", "CapPrm": "00000000000000e0", "CapInh": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000"}
	for k, v := range want {
		if st[k] != v {
			t.Errorf("agent %s = %s, want %s", k, st[k], v)
		}
	}

	// A command: the user's uid, no capability at all, and it cannot stop the agent.
	st2, out := doReq(t, c, "POST", "/processes", map[string]interface{}{
		"cmd": fmt.Sprintf("grep -E '^(Uid|Cap...):' /proc/self/status; kill -STOP %d && echo stopped", cmd.Process.Pid)})
	if st2 != 201 {
		t.Fatalf("start: %d %s", st2, out)
	}
	var started struct{ Pid int }
	json.Unmarshal(out, &started)
	resp, err := c.Get(fmt.Sprintf("http://agent/processes/%d/output?follow=1", started.Pid))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var text strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		var l outLine
		json.Unmarshal([]byte(line), &l)
		if l.Type == "stdout" || l.Type == "stderr" {
			text.Write(l.bytes(t))
		}
	}
	got := text.String()
	if !strings.Contains(got, "Uid:\t245678\t245678\t245678\t245678") || strings.Contains(got, "stopped") {
		t.Fatalf("command output %q", got)
	}
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if !strings.Contains(got, k+":\t0000000000000000") {
			t.Errorf("command %s not empty: %q", k, got)
		}
	}

	// Files: written ones belong to the user; what the user cannot read is 403.
	if s, out := doReq(t, c, "PUT", "/files/content?path="+filepath.Join(home, "f.txt"), []byte("x")); s != 200 {
		t.Fatalf("put: %d %s", s, out)
	}
	var fi syscall.Stat_t
	if err := syscall.Stat(filepath.Join(home, "f.txt"), &fi); err != nil || fi.Uid != userUID || fi.Gid != userUID {
		t.Fatalf("written file owned by %d:%d (%v)", fi.Uid, fi.Gid, err)
	}
	if s, out := doReq(t, c, "GET", "/files/content?path="+filepath.Join(dir, "rootonly"), nil); s != 403 {
		t.Fatalf("root-only file: %d %s", s, out)
	}
	if s, out := doReq(t, c, "POST", "/files/mkdir", map[string]interface{}{"path": filepath.Join(dir, "nope")}); s != 403 {
		t.Fatalf("mkdir in a root folder: %d %s", s, out)
	}
}

func TestFollowKeepalive(t *testing.T) {
	old := keepaliveEvery
	keepaliveEvery = 100 * time.Millisecond
	defer func() { keepaliveEvery = old }()
	pid := start(t, map[string]interface{}{"cmd": "sleep 0.35; echo done"})
	resp, err := testClient.Get(fmt.Sprintf("http://agent/processes/%d/output?follow=1", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("X-Hangar-Keepalive") == "" {
		t.Fatal("no X-Hangar-Keepalive header on a follow stream")
	}
	body, _ := io.ReadAll(resp.Body)
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	if len(lines) < 4 || lines[0] != `{"type":"keepalive"}` || !strings.Contains(lines[len(lines)-1], `"type":"exit"`) {
		t.Fatalf("follow of a quiet process: %q", lines)
	}
}

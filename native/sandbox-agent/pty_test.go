package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// followToExit reads a pty process's output (follow=1) until it exits, failing after d.
func followToExit(t *testing.T, pid int, d time.Duration) output {
	t.Helper()
	done := make(chan output, 1)
	go func() { done <- readOutput(t, pid, "?follow=1") }()
	select {
	case o := <-done:
		return o
	case <-time.After(d):
		t.Fatalf("process %d did not exit within %v", pid, d)
		return output{}
	}
}

// waitOutput polls a process's output until it contains want.
func waitOutput(t *testing.T, pid int, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(readOutput(t, pid, "").stdout, want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the output of %d", want, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestPtyShell(t *testing.T) {
	pid := start(t, map[string]interface{}{
		"args": []string{"/bin/sh"}, "pty": map[string]int{"cols": 100, "rows": 30},
		"env": map[string]string{"PS1": "$ "},
	})
	if p := getProc(t, pid); !p.Pty || !p.StdinOpen {
		t.Fatalf("record %+v: want pty and stdin open", p)
	}
	expectStatus(t, "POST", fmt.Sprintf("/processes/%d/stdin", pid),
		map[string]interface{}{"data": b64("echo $((6*7)); tty; stty size; [ -t 0 ] && echo term-$((1+1))\n")}, 204)
	waitOutput(t, pid, "term-2\r\n")
	expectStatus(t, "POST", fmt.Sprintf("/processes/%d/resize", pid), map[string]int{"cols": 132, "rows": 43}, 204)
	expectStatus(t, "POST", fmt.Sprintf("/processes/%d/stdin", pid),
		map[string]interface{}{"data": b64("stty size; exit 3\n")}, 204)
	o := followToExit(t, pid, 10*time.Second)
	if o.exit.ExitCode == nil || *o.exit.ExitCode != 3 {
		t.Fatalf("exit %+v, output %q", o.exit, o.stdout)
	}
	for _, want := range []string{"42\r\n", "30 100\r\n", "43 132\r\n", "term-2\r\n"} {
		if !strings.Contains(o.stdout, want) {
			t.Fatalf("output %q lacks %q", o.stdout, want)
		}
	}
	if !regexp.MustCompile(`/dev/pts/\d+\r\n`).MatchString(o.stdout) {
		t.Fatalf("output %q names no /dev/pts terminal", o.stdout)
	}
	if o.stderr != "" {
		t.Fatalf("a terminal has one stream; stderr %q", o.stderr)
	}
	// After the exit: no more input, no resize.
	expectError(t, "POST", fmt.Sprintf("/processes/%d/resize", pid), map[string]int{"cols": 10, "rows": 10}, 409, "conflict")
	expectError(t, "POST", fmt.Sprintf("/processes/%d/stdin", pid), map[string]interface{}{"data": b64("x")}, 409, "conflict")
}

func TestPtyEOFAndSession(t *testing.T) {
	// The process leads its own session on the terminal; eof is ^D, which ends cat.
	pid := start(t, map[string]interface{}{"cmd": "echo sid=$(ps -o sid= -p $$) me=$$; cat; echo cat-done", "pty": map[string]int{}})
	expectStatus(t, "POST", fmt.Sprintf("/processes/%d/stdin", pid), map[string]interface{}{"data": b64("hello\n"), "eof": true}, 204)
	o := followToExit(t, pid, 10*time.Second)
	if o.exit.ExitCode == nil || *o.exit.ExitCode != 0 || !strings.Contains(o.stdout, "hello\r\n") || !strings.Contains(o.stdout, "cat-done") {
		t.Fatalf("exit %+v output %q", o.exit, o.stdout)
	}
	m := regexp.MustCompile(`sid=\s*(\d+) me=(\d+)`).FindStringSubmatch(o.stdout)
	if m == nil || m[1] != m[2] {
		t.Fatalf("not a session leader: %q", o.stdout)
	}
}

func TestPtyValidationAndKill(t *testing.T) {
	expectError(t, "POST", "/processes", map[string]interface{}{"cmd": "true", "pty": map[string]int{"cols": 5000, "rows": 2}}, 400, "bad_request")
	expectError(t, "POST", "/processes", map[string]interface{}{"cmd": "true", "pty": map[string]int{"cols": -1}}, 400, "bad_request")
	// A process without a terminal cannot be resized.
	plain := start(t, map[string]interface{}{"cmd": "sleep 5", "keepStdin": true})
	expectError(t, "POST", fmt.Sprintf("/processes/%d/resize", plain), map[string]int{"cols": 10, "rows": 10}, 409, "conflict")
	expectStatus(t, "POST", fmt.Sprintf("/processes/%d/signal", plain), map[string]string{"signal": "KILL"}, 204)
	expectError(t, "POST", fmt.Sprintf("/processes/%d/resize", plain), map[string]int{"cols": 0, "rows": 10}, 400, "bad_request")

	// A hang-up ends an interactive shell; output before it is kept.
	pid := start(t, map[string]interface{}{"args": []string{"/bin/sh", "-i"}, "pty": map[string]int{"cols": 80, "rows": 24}})
	expectStatus(t, "POST", fmt.Sprintf("/processes/%d/stdin", pid), map[string]interface{}{"data": b64("echo rea''dy\n")}, 204)
	waitOutput(t, pid, "ready\r\n")
	expectStatus(t, "POST", fmt.Sprintf("/processes/%d/signal", pid), map[string]string{"signal": "HUP"}, 204)
	o := followToExit(t, pid, 10*time.Second)
	b, _ := json.Marshal(o.exit)
	if o.exit.Signal == nil || *o.exit.Signal != "SIGHUP" {
		t.Fatalf("exit %s", b)
	}
}

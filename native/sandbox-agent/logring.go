package main

import "sync"

// logRing keeps the last max bytes the agent logged, served at GET /log. The agent's stdout and stderr
// are /dev/null in a sandbox: its log is never a file the sandbox could reach or fill.
type logRing struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newLogRing(max int) *logRing { return &logRing{max: max} }

func (l *logRing) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	if len(p) > l.max {
		p = p[len(p)-l.max:]
	}
	if over := len(l.buf) + len(p) - l.max; over > 0 {
		l.buf = append(l.buf[:0], l.buf[over:]...)
	}
	l.buf = append(l.buf, p...)
	return n, nil
}

// Bytes returns a copy of what is kept.
func (l *logRing) Bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.buf...)
}

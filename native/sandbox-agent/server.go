package main

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// maxJSONBody bounds JSON request bodies (stdin payloads are base64 inside them).
const maxJSONBody = 64 << 20

// Server is the agent's HTTP handler.
type Server struct {
	m         *Manager
	startedAt time.Time
	log       *logRing
}

// NewServer returns the handler for m.
func NewServer(m *Manager) *Server {
	return &Server{m: m, startedAt: time.Now()}
}

// files runs a file operation with the sandbox user's rights (asUser).
func (s *Server) files(w http.ResponseWriter, handler func()) {
	if err := asUser(s.m.cfg.User, func() error { handler(); return nil }); err != nil {
		writeErr(w, err)
	}
}

type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeJSON(w http.ResponseWriter, status int, v interface{}) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = 500, []byte(`{"error":{"code":"internal","message":"cannot encode response"}}`)
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]apiError{"error": {Code: code, Message: msg}})
}

func writeErr(w http.ResponseWriter, err error) {
	var re *requestError
	if errors.As(err, &re) {
		writeError(w, re.status, re.code, re.msg)
		return
	}
	writeError(w, 500, "internal", err.Error())
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request, allowed string) {
	w.Header().Set("Allow", allowed)
	writeError(w, 405, "method_not_allowed", r.Method+" is not allowed on "+r.URL.Path+" (allowed: "+allowed+")")
}

func notFound(w http.ResponseWriter, msg string) {
	writeError(w, 404, "not_found", msg)
}

// decodeJSON reads a JSON object body into v.
func decodeJSON(w http.ResponseWriter, r *http.Request, v interface{}) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, 413, "too_large", "request body exceeds "+strconv.Itoa(maxJSONBody)+" bytes")
		} else {
			writeError(w, 400, "bad_request", "cannot read request body: "+err.Error())
		}
		return false
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		body = []byte("{}")
	}
	if err := json.Unmarshal(body, v); err != nil {
		writeError(w, 400, "bad_request", "invalid JSON body: "+err.Error())
		return false
	}
	return true
}

func decodeBase64(s string) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		// Accept unpadded input too.
		if b2, err2 := base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "=")); err2 == nil {
			return b2, nil
		}
	}
	return b, err
}

func boolParam(r *http.Request, name string) bool {
	switch strings.ToLower(r.URL.Query().Get(name)) {
	case "1", "true", "yes":
		return true
	}
	return false
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	switch {
	case path == "/health":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, r, "GET")
			return
		}
		writeJSON(w, 200, map[string]interface{}{"ok": true, "pid": os.Getpid(), "startedAt": fmtTime(s.startedAt)})
	case path == "/log":
		if r.Method != http.MethodGet {
			methodNotAllowed(w, r, "GET")
			return
		}
		var b []byte
		if s.log != nil {
			b = s.log.Bytes()
		}
		h := w.Header()
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(200)
		_, _ = w.Write(b)
	case path == "/env":
		if r.Method != http.MethodPut {
			methodNotAllowed(w, r, "PUT")
			return
		}
		var req struct {
			Env map[string]string `json:"env"`
		}
		if !decodeJSON(w, r, &req) {
			return
		}
		if err := s.m.SetBaseEnv(req.Env); err != nil {
			writeErr(w, err)
			return
		}
		w.WriteHeader(204)
	case path == "/processes":
		switch r.Method {
		case http.MethodGet:
			writeJSON(w, 200, map[string]interface{}{"processes": s.m.List()})
		case http.MethodPost:
			s.startProcess(w, r)
		default:
			methodNotAllowed(w, r, "GET, POST")
		}
	case strings.HasPrefix(path, "/processes/"):
		s.processRoute(w, r, strings.TrimPrefix(path, "/processes/"))
	case path == "/files":
		switch r.Method {
		case http.MethodGet:
			s.files(w, func() { s.filesList(w, r) })
		case http.MethodDelete:
			s.files(w, func() { s.filesDelete(w, r) })
		default:
			methodNotAllowed(w, r, "GET, DELETE")
		}
	case path == "/files/content":
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			s.files(w, func() { s.filesGetContent(w, r) })
		case http.MethodPut:
			s.files(w, func() { s.filesPutContent(w, r) })
		default:
			methodNotAllowed(w, r, "GET, PUT")
		}
	case path == "/files/mkdir":
		if r.Method != http.MethodPost {
			methodNotAllowed(w, r, "POST")
			return
		}
		s.files(w, func() { s.filesMkdir(w, r) })
	case path == "/files/move":
		if r.Method != http.MethodPost {
			methodNotAllowed(w, r, "POST")
			return
		}
		s.files(w, func() { s.filesMove(w, r) })
	default:
		notFound(w, "no such endpoint: "+path)
	}
}

func (s *Server) startProcess(w http.ResponseWriter, r *http.Request) {
	var req StartRequest
	if !decodeJSON(w, r, &req) {
		return
	}
	p, err := s.m.Start(&req)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, 201, map[string]interface{}{"pid": p.pid, "startedAt": fmtTime(p.startedAt)})
}

func (s *Server) processRoute(w http.ResponseWriter, r *http.Request, rest string) {
	idStr, sub, _ := strings.Cut(rest, "/")
	pid, err := strconv.Atoi(idStr)
	if err != nil || pid <= 0 {
		notFound(w, "no such process: "+idStr)
		return
	}
	p := s.m.Get(pid)
	if p == nil {
		notFound(w, "no such process: "+idStr)
		return
	}
	switch sub {
	case "":
		if r.Method != http.MethodGet {
			methodNotAllowed(w, r, "GET")
			return
		}
		writeJSON(w, 200, p.Info())
	case "output":
		if r.Method != http.MethodGet {
			methodNotAllowed(w, r, "GET")
			return
		}
		s.output(w, r, p)
	case "stdin":
		if r.Method != http.MethodPost {
			methodNotAllowed(w, r, "POST")
			return
		}
		var req struct {
			Data string `json:"data"`
			EOF  bool   `json:"eof"`
		}
		if !decodeJSON(w, r, &req) {
			return
		}
		data, err := decodeBase64(req.Data)
		if err != nil {
			writeError(w, 400, "bad_request", "data is not valid base64")
			return
		}
		if err := p.WriteStdin(data, req.EOF, r.Context().Done()); err != nil {
			writeErr(w, err)
			return
		}
		w.WriteHeader(204)
	case "resize":
		if r.Method != http.MethodPost {
			methodNotAllowed(w, r, "POST")
			return
		}
		var req PtySize
		if !decodeJSON(w, r, &req) {
			return
		}
		if err := p.Resize(req); err != nil {
			writeErr(w, err)
			return
		}
		w.WriteHeader(204)
	case "signal":
		if r.Method != http.MethodPost {
			methodNotAllowed(w, r, "POST")
			return
		}
		var req struct {
			Signal string `json:"signal"`
		}
		if !decodeJSON(w, r, &req) {
			return
		}
		sig, ok := parseSignal(req.Signal)
		if !ok {
			writeError(w, 400, "bad_request", "unknown signal "+strconv.Quote(req.Signal)+
				" (allowed: SIGTERM, SIGKILL, SIGINT, SIGHUP, SIGUSR1, SIGUSR2, SIGQUIT)")
			return
		}
		if err := p.Signal(sig); err != nil {
			writeErr(w, err)
			return
		}
		w.WriteHeader(204)
	default:
		notFound(w, "no such endpoint: "+r.URL.Path)
	}
}

// keepaliveEvery is how often a follow stream of a quiet process gets a keepalive line.
var keepaliveEvery = 15 * time.Second

var keepaliveLine = []byte(`{"type":"keepalive"}` + "\n")

type exitLine struct {
	Type       string  `json:"type"`
	ExitCode   *int    `json:"exitCode"`
	Signal     *string `json:"signal"`
	TimedOut   bool    `json:"timedOut"`
	DurationMs int64   `json:"durationMs"`
	Truncated  bool    `json:"truncated"`
}

// output streams the process output as NDJSON; see PROTOCOL.md.
func (s *Server) output(w http.ResponseWriter, r *http.Request, p *Proc) {
	follow := boolParam(r, "follow")
	var cursor int64
	if a := r.URL.Query().Get("after"); a != "" {
		n, err := strconv.ParseInt(a, 10, 64)
		if err != nil || n < 0 {
			writeError(w, 400, "bad_request", "after must be a non-negative integer")
			return
		}
		cursor = n
	}
	h := w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if follow {
		h.Set("X-Hangar-Keepalive", strconv.Itoa(int(keepaliveEvery/time.Second)))
	}
	w.WriteHeader(200)
	flusher, _ := w.(http.Flusher)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	ctx := r.Context()
	var line []byte
	for {
		// One consistent snapshot per round: the chunks from cursor, and the exit line if finished.
		p.mu.Lock()
		chunks := p.chunksFromLocked(cursor)
		finished := p.finished
		var notify chan struct{}
		var exit exitLine
		if finished {
			exit = exitLine{Type: "exit", TimedOut: p.timedOut, Truncated: p.truncated,
				DurationMs: p.endedAt.Sub(p.startedAt).Milliseconds()}
			exit.ExitCode, exit.Signal = p.exitStatusLocked()
		} else if follow && len(chunks) == 0 {
			notify = p.notify
			p.notifyUsed = true
		}
		p.mu.Unlock()

		for _, c := range chunks {
			line = appendChunkLine(line[:0], c)
			if _, err := w.Write(line); err != nil {
				return
			}
			cursor = c.offset + int64(len(c.data))
		}
		if finished {
			b, _ := json.Marshal(exit)
			_, _ = w.Write(append(b, '\n'))
			flush()
			return
		}
		flush()
		if !follow || ctx.Err() != nil {
			return
		}
		if notify != nil {
			// A quiet process still shows the client that the agent is alive (its idle timeout).
			timer := time.NewTimer(keepaliveEvery)
			select {
			case <-notify:
				timer.Stop()
			case <-timer.C:
				if _, err := w.Write(keepaliveLine); err != nil {
					return
				}
			case <-ctx.Done():
				timer.Stop()
				return
			}
		}
	}
}

func appendChunkLine(b []byte, c chunk) []byte {
	b = append(b, `{"type":"`...)
	b = append(b, c.kind.String()...)
	b = append(b, `","data":"`...)
	n := base64.StdEncoding.EncodedLen(len(c.data))
	start := len(b)
	if cap(b)-start < n+64 {
		nb := make([]byte, start, start+n+64)
		copy(nb, b)
		b = nb
	}
	b = b[:start+n]
	base64.StdEncoding.Encode(b[start:], c.data)
	b = append(b, `","offset":`...)
	b = strconv.AppendInt(b, c.offset, 10)
	return append(b, "}\n"...)
}

package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Entry is the JSON form of a file system entry.
type Entry struct {
	Name  string `json:"name"`
	Path  string `json:"path"`
	Type  string `json:"type"`
	Size  int64  `json:"size"`
	Mode  string `json:"mode"`
	Mtime string `json:"mtime"`
}

func entryOf(path string, fi fs.FileInfo) Entry {
	t := "other"
	switch m := fi.Mode(); {
	case m.IsRegular():
		t = "file"
	case m.IsDir():
		t = "dir"
	case m&fs.ModeSymlink != 0:
		t = "symlink"
	}
	name := filepath.Base(path)
	return Entry{Name: name, Path: path, Type: t, Size: fi.Size(),
		Mode: fmt.Sprintf("%04o", uint32(fi.Mode().Perm())), Mtime: fmtTime(fi.ModTime())}
}

// cleanPath validates a client path: non-empty, absolute, no NUL; returns it cleaned.
func cleanPath(p, what string) (string, error) {
	switch {
	case p == "":
		return "", badRequest("%s is required", what)
	case strings.IndexByte(p, 0) >= 0:
		return "", badRequest("%s contains a NUL byte", what)
	case !strings.HasPrefix(p, "/"):
		return "", badRequest("%s must be absolute: %q", what, p)
	}
	return filepath.Clean(p), nil
}

// fileError maps a file system error to an API error.
func fileError(err error) error {
	var re *requestError
	if errors.As(err, &re) {
		return err
	}
	msg := err.Error()
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		if errors.Is(err, fs.ErrNotExist) {
			return &requestError{404, "not_found", msg}
		}
		return &requestError{500, "internal", msg}
	}
	switch errno {
	case syscall.ENOENT:
		return &requestError{404, "not_found", msg}
	case syscall.ENOTDIR:
		return &requestError{400, "not_a_directory", msg}
	case syscall.EISDIR:
		return &requestError{400, "is_a_directory", msg}
	case syscall.EACCES, syscall.EPERM, syscall.EROFS:
		return &requestError{403, "permission_denied", msg}
	case syscall.EEXIST:
		return &requestError{409, "already_exists", msg}
	case syscall.ENOTEMPTY:
		return &requestError{409, "conflict", msg}
	case syscall.ENOSPC, syscall.EDQUOT, syscall.EFBIG:
		return &requestError{413, "too_large", msg}
	case syscall.ENAMETOOLONG, syscall.ELOOP, syscall.EXDEV, syscall.EINVAL, syscall.EBUSY:
		return &requestError{400, "bad_request", msg}
	}
	return &requestError{500, "internal", msg}
}

func (s *Server) queryPath(w http.ResponseWriter, r *http.Request) (string, bool) {
	p, err := cleanPath(r.URL.Query().Get("path"), "path")
	if err != nil {
		writeErr(w, err)
		return "", false
	}
	return p, true
}

// GET /files?path=
func (s *Server) filesList(w http.ResponseWriter, r *http.Request) {
	path, ok := s.queryPath(w, r)
	if !ok {
		return
	}
	st, err := os.Stat(path) // follows a symlink to a directory
	if err != nil || !st.IsDir() {
		li, lerr := os.Lstat(path)
		if lerr != nil {
			writeErr(w, fileError(lerr))
			return
		}
		writeJSON(w, 200, map[string]Entry{"entry": entryOf(path, li)})
		return
	}
	des, err := os.ReadDir(path)
	if err != nil {
		writeErr(w, fileError(err))
		return
	}
	entries := make([]Entry, 0, len(des))
	for _, de := range des { // os.ReadDir sorts by name
		fi, err := de.Info() // lstat
		if err != nil {
			continue // vanished meanwhile
		}
		entries = append(entries, entryOf(filepath.Join(path, de.Name()), fi))
	}
	writeJSON(w, 200, map[string][]Entry{"entries": entries})
}

// GET /files/content?path=
func (s *Server) filesGetContent(w http.ResponseWriter, r *http.Request) {
	path, ok := s.queryPath(w, r)
	if !ok {
		return
	}
	f, err := os.Open(path)
	if err != nil {
		writeErr(w, fileError(err))
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		writeErr(w, fileError(err))
		return
	}
	if fi.IsDir() {
		writeError(w, 400, "is_a_directory", path+" is a directory")
		return
	}
	if !fi.Mode().IsRegular() {
		writeError(w, 400, "bad_request", path+" is not a regular file")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	h.Set("Last-Modified", fi.ModTime().UTC().Format(http.TimeFormat))
	w.WriteHeader(200)
	if r.Method != http.MethodHead {
		_, _ = io.CopyN(w, f, fi.Size())
	}
}

type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF {
		e.err = err
	}
	return n, err
}

// PUT /files/content?path=
func (s *Server) filesPutContent(w http.ResponseWriter, r *http.Request) {
	path, ok := s.queryPath(w, r)
	if !ok {
		return
	}
	if path == "/" {
		writeError(w, 400, "is_a_directory", "/ is a directory")
		return
	}
	target := path
	mode := fs.FileMode(0o644)
	if li, err := os.Lstat(path); err == nil {
		fi := li
		if li.Mode()&fs.ModeSymlink != 0 {
			// Write through the link (to its target) rather than replacing it.
			if real, err := filepath.EvalSymlinks(path); err == nil {
				target = real
				if st, err := os.Stat(real); err == nil {
					fi = st
				}
			}
		}
		if fi.IsDir() {
			writeError(w, 400, "is_a_directory", path+" is a directory")
			return
		}
		if fi.Mode().IsRegular() {
			mode = fi.Mode().Perm()
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		writeErr(w, fileError(err))
		return
	}
	dir := filepath.Dir(target)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		writeErr(w, fileError(err))
		return
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(target)+".hangar-*")
	if err != nil {
		writeErr(w, fileError(err))
		return
	}
	tmpName := tmp.Name()
	fail := func(err error) {
		tmp.Close()
		os.Remove(tmpName)
		writeErr(w, err)
	}
	body := &errReader{r: r.Body}
	if _, err := io.Copy(tmp, body); err != nil {
		if body.err != nil {
			fail(badRequest("cannot read request body: %v", body.err))
		} else {
			fail(fileError(err))
		}
		return
	}
	if err := tmp.Chmod(mode); err != nil {
		fail(fileError(err))
		return
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmpName)
		writeErr(w, fileError(err))
		return
	}
	if err := os.Rename(tmpName, target); err != nil {
		os.Remove(tmpName)
		writeErr(w, fileError(err))
		return
	}
	fi, err := os.Stat(path)
	if err != nil {
		writeErr(w, fileError(err))
		return
	}
	writeJSON(w, 200, map[string]Entry{"entry": entryOf(path, fi)})
}

// POST /files/mkdir {"path","parents"}
func (s *Server) filesMkdir(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Path    string `json:"path"`
		Parents bool   `json:"parents"`
	}
	if !decodeJSON(w, r, &req) {
		return
	}
	path, err := cleanPath(req.Path, "path")
	if err != nil {
		writeErr(w, err)
		return
	}
	if fi, err := os.Stat(path); err == nil {
		if req.Parents && fi.IsDir() {
			writeJSON(w, 200, map[string]Entry{"entry": entryOf(path, fi)})
			return
		}
		writeError(w, 409, "already_exists", path+" already exists")
		return
	}
	if req.Parents {
		err = os.MkdirAll(path, 0o755)
	} else {
		err = os.Mkdir(path, 0o755)
	}
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			writeError(w, 404, "not_found", "parent directory of "+path+" does not exist")
			return
		}
		writeErr(w, fileError(err))
		return
	}
	fi, err := os.Lstat(path)
	if err != nil {
		writeErr(w, fileError(err))
		return
	}
	writeJSON(w, 201, map[string]Entry{"entry": entryOf(path, fi)})
}

// DELETE /files?path=&recursive=1
func (s *Server) filesDelete(w http.ResponseWriter, r *http.Request) {
	path, ok := s.queryPath(w, r)
	if !ok {
		return
	}
	if path == "/" {
		writeError(w, 400, "bad_request", "refusing to delete /")
		return
	}
	fi, err := os.Lstat(path)
	if err != nil {
		writeErr(w, fileError(err))
		return
	}
	if boolParam(r, "recursive") && fi.IsDir() {
		err = os.RemoveAll(path)
	} else {
		err = os.Remove(path)
		if err != nil && fi.IsDir() && (errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST)) {
			writeError(w, 409, "conflict", path+" is a non-empty directory (use recursive=1)")
			return
		}
	}
	if err != nil {
		writeErr(w, fileError(err))
		return
	}
	w.WriteHeader(204)
}

// POST /files/move {"from","to"}
func (s *Server) filesMove(w http.ResponseWriter, r *http.Request) {
	var req struct {
		From string `json:"from"`
		To   string `json:"to"`
	}
	if !decodeJSON(w, r, &req) {
		return
	}
	from, err := cleanPath(req.From, "from")
	if err != nil {
		writeErr(w, err)
		return
	}
	to, err := cleanPath(req.To, "to")
	if err != nil {
		writeErr(w, err)
		return
	}
	if from == "/" || to == "/" {
		writeError(w, 400, "bad_request", "cannot move / or onto /")
		return
	}
	if _, err := os.Lstat(from); err != nil {
		writeErr(w, fileError(err))
		return
	}
	if _, err := os.Lstat(to); err == nil {
		writeError(w, 409, "already_exists", to+" already exists")
		return
	} else if !errors.Is(err, fs.ErrNotExist) {
		writeErr(w, fileError(err))
		return
	}
	if strings.HasPrefix(to, from+"/") {
		writeError(w, 400, "bad_request", "cannot move "+from+" into itself")
		return
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		writeErr(w, fileError(err))
		return
	}
	if err := os.Rename(from, to); err != nil {
		writeErr(w, fileError(err))
		return
	}
	fi, err := os.Lstat(to)
	if err != nil {
		writeErr(w, fileError(err))
		return
	}
	writeJSON(w, 200, map[string]Entry{"entry": entryOf(to, fi)})
}

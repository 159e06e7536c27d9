package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// Terminal sizes a start or resize request may ask for.
const (
	maxPtyDim      = 1000
	defaultPtyCols = 80
	defaultPtyRows = 24
)

// PtySize is the `pty` member of a start request and the body of POST /processes/{pid}/resize.
type PtySize struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// check validates a size; zero members take the defaults (80x24) when defaults is true.
func (s *PtySize) check(defaults bool) error {
	if defaults {
		if s.Cols == 0 {
			s.Cols = defaultPtyCols
		}
		if s.Rows == 0 {
			s.Rows = defaultPtyRows
		}
	}
	if s.Cols < 1 || s.Cols > maxPtyDim || s.Rows < 1 || s.Rows > maxPtyDim {
		return badRequest("cols and rows must be whole numbers from 1 to %d", maxPtyDim)
	}
	return nil
}

type winsize struct {
	Row, Col, Xpixel, Ypixel uint16
}

func ioctl(fd int, req uintptr, arg uintptr) error {
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), req, arg); errno != 0 {
		return errno
	}
	return nil
}

func setWinsize(fd int, s PtySize) error {
	ws := winsize{Row: uint16(s.Rows), Col: uint16(s.Cols)}
	return ioctl(fd, syscall.TIOCSWINSZ, uintptr(unsafe.Pointer(&ws)))
}

// openPty opens a new pseudo-terminal of the given size: the master as a pollable *os.File and the slave
// as a raw descriptor for the child (both close-on-exec; the slave without becoming the agent's controlling
// terminal). Called as the sandbox user (asUser), so the new /dev/pts/N belongs to the user.
func openPty(size PtySize) (master *os.File, slave int, name string, err error) {
	mfd, err := syscall.Open("/dev/ptmx", syscall.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, -1, "", fmt.Errorf("open /dev/ptmx: %w", err)
	}
	fail := func(what string, e error) (*os.File, int, string, error) {
		syscall.Close(mfd)
		return nil, -1, "", fmt.Errorf("%s: %w", what, e)
	}
	unlock := int32(0)
	if e := ioctl(mfd, syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); e != nil {
		return fail("unlock pty", e)
	}
	var n uint32
	if e := ioctl(mfd, syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); e != nil {
		return fail("pty number", e)
	}
	name = "/dev/pts/" + strconv.FormatUint(uint64(n), 10)
	sfd, e := syscall.Open(name, syscall.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if e != nil {
		return fail("open "+name, e)
	}
	if e := setWinsize(sfd, size); e != nil {
		syscall.Close(sfd)
		return fail("set the terminal size", e)
	}
	return os.NewFile(uintptr(mfd), "/dev/ptmx"), sfd, name, nil
}

// Resize sets the terminal size of a process started with a pty; the kernel sends its foreground process
// group SIGWINCH.
func (p *Proc) Resize(s PtySize) error {
	if err := s.check(false); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ptmx == nil {
		return conflict("process %d has no terminal (start it with pty)", p.pid)
	}
	if p.finished || p.ptyClosed {
		return conflict("process %d has exited", p.pid)
	}
	fd, err := p.ptmx.SyscallConn()
	if err != nil {
		return err
	}
	var ioErr error
	if err := fd.Control(func(fd uintptr) { ioErr = setWinsize(int(fd), s) }); err != nil {
		return conflict("process %d has exited", p.pid)
	}
	return ioErr
}

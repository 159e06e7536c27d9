package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"
)

// The agent and the sandbox user are different uids (PROTOCOL.md, "Privileges"): the agent starts as its
// own uid with CAP_SETUID, CAP_SETGID, CAP_KILL and CAP_SETPCAP (runc puts them in every set, ambient
// included, so that they survive the execve of a non-root uid). setupPrivileges then empties the ambient,
// inheritable and bounding sets on every thread and drops CAP_SETPCAP, and makes the agent non-dumpable:
// commands it starts as the user end with no capability at all after execve, and the user can neither
// signal, trace nor inspect the agent (its /proc/1 files belong to root).

const (
	prSetDumpable        = 4
	prCapbsetDrop        = 24
	prCapAmbient         = 47
	prCapAmbientClearAll = 4

	capKill    = 5
	capSetgid  = 6
	capSetuid  = 7
	capSetpcap = 8

	linuxCapabilityVersion3 = 0x20080522

	atEaccess     = 0x200
	sysFaccessat2 = 439
)

// userIDs is the sandbox user commands and file operations run as.
type userIDs struct {
	uid, gid int
}

type capHeader struct {
	version uint32
	pid     int32
}

type capData struct {
	effective, permitted, inheritable uint32
}

// keptCaps are what the agent holds after setup: start commands as the user (SETUID/SETGID, also for
// setfsuid/setfsgid), and signal their process groups (KILL).
const keptCaps = 1<<capKill | 1<<capSetgid | 1<<capSetuid

// userFromEnv reads HANGAR_AGENT_UID/HANGAR_AGENT_GID; nil when unset (commands run as the agent's uid).
func userFromEnv() (*userIDs, error) {
	us, gs := os.Getenv("HANGAR_AGENT_UID"), os.Getenv("HANGAR_AGENT_GID")
	if us == "" && gs == "" {
		return nil, nil
	}
	uid, err1 := strconv.Atoi(us)
	gid, err2 := strconv.Atoi(gs)
	if err1 != nil || err2 != nil || uid <= 0 || gid <= 0 {
		return nil, fmt.Errorf("HANGAR_AGENT_UID=%q HANGAR_AGENT_GID=%q: both must be positive integers", us, gs)
	}
	return &userIDs{uid: uid, gid: gid}, nil
}

// setupPrivileges is called once at start, before anything is started. It fails (and the agent exits)
// rather than run commands with capabilities they must not have.
func setupPrivileges(u *userIDs) error {
	if os.Getuid() == u.uid || os.Geteuid() == u.uid || os.Getgid() == u.gid {
		return fmt.Errorf("the agent runs as uid %d gid %d, the sandbox user's: it must have a uid of its own", os.Getuid(), os.Getgid())
	}
	if os.Geteuid() == 0 {
		return errors.New("the agent must not run as root when it runs commands as a sandbox user")
	}
	hdr := capHeader{version: linuxCapabilityVersion3}
	var data [2]capData
	if _, _, e := syscall.RawSyscall(syscall.SYS_CAPGET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("capget: %v", e)
	}
	if data[0].permitted&keptCaps != keptCaps || data[0].permitted&(1<<capSetpcap) == 0 {
		return fmt.Errorf("the agent lacks CAP_SETUID, CAP_SETGID, CAP_KILL or CAP_SETPCAP (permitted %#x)", data[0].permitted)
	}
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, prCapAmbient, prCapAmbientClearAll, 0); e != 0 {
		return fmt.Errorf("clearing the ambient capabilities: %v", e)
	}
	for c := uintptr(0); c < 64; c++ {
		_, _, e := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, prCapbsetDrop, c, 0)
		if e == syscall.EINVAL {
			break // past the kernel's last capability
		}
		if e != 0 {
			return fmt.Errorf("dropping capability %d from the bounding set: %v", c, e)
		}
	}
	hdr = capHeader{version: linuxCapabilityVersion3}
	data = [2]capData{{effective: keptCaps, permitted: keptCaps}}
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("capset: %v", e)
	}
	runtime.KeepAlive(&hdr)
	runtime.KeepAlive(&data)
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); e != 0 {
		return fmt.Errorf("PR_SET_DUMPABLE: %v", e)
	}
	return nil
}

func setfsids(uid, gid int) bool {
	syscall.RawSyscall(syscall.SYS_SETFSGID, uintptr(gid), 0, 0)
	syscall.RawSyscall(syscall.SYS_SETFSUID, uintptr(uid), 0, 0)
	// Both calls return the previous id whatever happens; an invalid id (-1) reads the current one.
	g, _, _ := syscall.RawSyscall(syscall.SYS_SETFSGID, ^uintptr(0), 0, 0)
	u, _, _ := syscall.RawSyscall(syscall.SYS_SETFSUID, ^uintptr(0), 0, 0)
	return int(u) == uid && int(g) == gid
}

type panicked struct{ v interface{} }

// asUser runs fn with the file-system identity (fsuid/fsgid) of u, so that permission checks, and the
// owner of what fn creates, are the sandbox user's. It runs on an OS thread of its own: if the thread
// cannot be given back the agent's ids, it stays locked and Go ends it with the goroutine. With u nil (no
// separate user), fn runs as is.
func asUser(u *userIDs, fn func() error) error {
	if u == nil {
		return fn()
	}
	var err error
	var p *panicked
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if !setfsids(u.uid, u.gid) {
			err = errors.New("cannot take the sandbox user's file-system identity")
			return // the thread stays locked and is thrown away
		}
		func() {
			defer func() {
				if v := recover(); v != nil {
					p = &panicked{v}
				}
			}()
			err = fn()
		}()
		if p == nil && setfsids(os.Geteuid(), os.Getegid()) {
			runtime.UnlockOSThread()
		}
	}()
	<-done
	if p != nil {
		panic(p.v)
	}
	return err
}

// accessible reports whether the calling thread's file-system identity may access path with mode (X_OK
// = 1), like access(2) but with the effective (fs) ids rather than the real ones.
func accessible(path string, mode uint32) bool {
	p, err := syscall.BytePtrFromString(path)
	if err != nil {
		return false
	}
	fdcwd := -100 // AT_FDCWD
	_, _, e := syscall.Syscall6(sysFaccessat2, uintptr(fdcwd), uintptr(unsafe.Pointer(p)), uintptr(mode), atEaccess, 0, 0)
	if e == syscall.ENOSYS {
		return syscall.Access(path, mode) == nil
	}
	return e == 0
}

//go:build linux

package shm

import (
	"os"

	"golang.org/x/sys/unix"
)

// exitWatch waits for the processes of the peers to exit, so that a rank
// killed without closing its transport (SIGKILL, a crash) is seen at once
// by the waits of this rank that wait on it, rather than at their next
// liveness check (Config.LivenessInterval, 100 ms): its pidfd (Linux 5.3)
// becomes readable when it exits, and the watch marks the peer exited and
// wakes those waits. Peers whose pid is not visible from here, or that run
// in this process, are left to the liveness checks.
type exitWatch struct {
	stop int           // eventfd that Close writes to end the watch; -1: no watch
	done chan struct{} // closed when the watch has ended
}

// watchExits starts the watch, if any peer can be watched. Connect calls
// it once the peers are set up.
func (t *Transport) watchExits() {
	t.exits.stop = -1
	var fds []unix.PollFd
	var prs []*peer
	for _, pr := range t.peers {
		if pr == nil || !pr.checkPid || pr.pid == os.Getpid() {
			continue
		}
		fd, err := unix.PidfdOpen(pr.pid, 0)
		if err != nil {
			continue // an older kernel: the liveness checks remain
		}
		fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
		prs = append(prs, pr)
	}
	if len(prs) == 0 {
		return
	}
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		for _, f := range fds {
			unix.Close(int(f.Fd))
		}
		return
	}
	t.exits = exitWatch{stop: stop, done: make(chan struct{})}
	go t.awaitExits(append(fds, unix.PollFd{Fd: int32(stop), Events: unix.POLLIN}), prs)
}

// awaitExits is the watch: fds are the peers' pidfds, in the order of prs,
// and last the stop eventfd.
func (t *Transport) awaitExits(fds []unix.PollFd, prs []*peer) {
	defer close(t.exits.done)
	defer func() { // the pidfds still open; stopExits closes the eventfd
		for _, f := range fds[:len(prs)] {
			if f.Fd >= 0 {
				unix.Close(int(f.Fd))
			}
		}
	}()
	own := t.segs[t.cfg.Rank]
	for left := len(prs); left > 0; {
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			return // the liveness checks remain
		}
		if fds[len(prs)].Revents != 0 {
			return // Close
		}
		for i, pr := range prs {
			if fds[i].Fd < 0 || fds[i].Revents == 0 {
				continue
			}
			unix.Close(int(fds[i].Fd))
			fds[i].Fd = -1 // poll skips it from now on
			left--
			pr.exited.Store(true)
			// The waits that may wait on pr: for its messages, for room in
			// its ring, at the native all-reduce's barrier.
			forceWake(pr.in.cwait)
			forceWake(pr.out.pwait)
			forceWake(own.u32(offBwait))
		}
	}
}

// stopExits ends the watch and waits for it, before Close unmaps the
// segments that it wakes waiters in.
func (t *Transport) stopExits() {
	if t.exits.stop < 0 || t.exits.done == nil {
		return
	}
	var one [8]byte
	one[0] = 1
	unix.Write(t.exits.stop, one[:])
	<-t.exits.done
	unix.Close(t.exits.stop)
	t.exits.stop = -1
}

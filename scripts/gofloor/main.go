//go:build linux

// Command gofloor is scripts/floor.c written in Go: two processes, one per
// core, and in each iteration both send BYTES to the other and wait for
// what the other sent, with nothing else around it. floor.c gives the
// least a 2-rank all-reduce can cost in any language; gofloor gives the
// least it can cost in Go, whose system calls and scheduler sit between
// the program and the kernel (collkit's tcp transport makes the same raw
// system calls as the tcp case here):
//
//	tcp: one write and one polled recv (MSG_DONTWAIT) on a loopback TCP
//	     connection with TCP_NODELAY, as raw system calls on the socket;
//	shm: the payload and an iteration number stored in this process's
//	     cache line of a shared mapping, then the peer's line polled.
//
// Usage: gofloor tcp|shm [ITERS [BYTES]]   (default 20000 iterations, 8 bytes)
//
// It prints "floor-go TRANSPORT BYTES US": the slower process's mean time
// per iteration in microseconds, after 1000 untimed iterations, as
// floor.c prints "floor ...". Each process runs with GOMAXPROCS 1, as
// collbench's ranks do when they outnumber or match the cores.
// scripts/compare-mpi.sh runs it beside floor.c, collbench and Open MPI.
package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	warmup   = 1000
	maxBytes = 4096
	line     = 64
	// roleEnv marks the second process: it holds the listener's address
	// (tcp) or "shm" (the mapping is its file 3); the report pipe is its
	// file 4, or 3 over tcp.
	roleEnv = "GOFLOOR_PEER"
)

// slotBytes is one of a rank's two slots: an iteration number, then the
// payload, on lines of their own.
const slotBytes = (8 + maxBytes + line - 1) / line * line

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gofloor:", err)
		os.Exit(1)
	}
}

// run is the program, printing its line to w.
func run(args []string, w io.Writer) error {
	usage := fmt.Errorf("usage: gofloor tcp|shm [ITERS [BYTES]] (BYTES 1 to %d)", maxBytes)
	if len(args) < 1 || args[0] != "tcp" && args[0] != "shm" {
		return usage
	}
	iters, size := 20000, 8
	var err error
	if len(args) > 1 {
		if iters, err = strconv.Atoi(args[1]); err != nil || iters < 1 {
			return usage
		}
	}
	if len(args) > 2 {
		if size, err = strconv.Atoi(args[2]); err != nil || size < 1 || size > maxBytes {
			return usage
		}
	}
	runtime.GOMAXPROCS(1)
	if peer, ok := os.LookupEnv(roleEnv); ok {
		return runPeer(args[0], peer, iters, size)
	}
	us, err := runFirst(args[0], iters, size)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "floor-go %s %d %.2f\n", args[0], size, us)
	return err
}

// runFirst is rank 0: it starts rank 1 (this program again), exchanges
// with it and returns the slower rank's mean. Rank 1 dies with it
// (Pdeathsig), and it exits if rank 1 fails first: over shared memory,
// neither would otherwise stop waiting for the other.
func runFirst(mode string, iters, size int) (float64, error) {
	rd, wr, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	defer wr.Close() // also closed once rank 1 has it
	cmd := exec.Command(os.Args[0], mode, strconv.Itoa(iters), strconv.Itoa(size))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var ex exchanger
	switch mode {
	case "tcp":
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer l.Close()
		cmd.Env = append(os.Environ(), roleEnv+"="+l.Addr().String())
		cmd.ExtraFiles = []*os.File{wr}
		stop, err := start(cmd)
		if err != nil {
			return 0, err
		}
		defer stop()
		c, err := l.Accept() // if rank 1 cannot dial, it exits, and start's watch ends this process
		if err != nil {
			return 0, err
		}
		defer c.Close()
		if ex, err = newTCP(c); err != nil {
			return 0, err
		}
	default:
		f, mem, err := newMapping()
		if err != nil {
			return 0, err
		}
		defer unix.Munmap(mem)
		cmd.Env = append(os.Environ(), roleEnv+"=shm")
		cmd.ExtraFiles = []*os.File{f, wr}
		stop, err := start(cmd)
		f.Close()
		if err != nil {
			return 0, err
		}
		defer stop()
		ex = &shmExchange{mem: mem, rank: 0}
	}
	wr.Close()
	mine, err := measure(ex, 0, iters, size)
	if err != nil {
		return 0, err
	}
	var buf [8]byte
	if _, err := io.ReadFull(rd, buf[:]); err != nil {
		return 0, fmt.Errorf("rank 1 reported nothing: %w", err)
	}
	return max(mine, math.Float64frombits(binary.NativeEndian.Uint64(buf[:]))), nil
}

// start starts rank 1 and then binds this process to its core (rank 1
// must inherit every core to pick its own), and exits this process with
// rank 1's error if rank 1 fails while it runs. stop ends rank 1 if it is
// still there and unbinds this process.
func start(cmd *exec.Cmd) (stop func(), err error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	unpin := pin(0)
	var stopping atomic.Bool
	go func() {
		if err := cmd.Wait(); err != nil && !stopping.Load() {
			fmt.Fprintln(os.Stderr, "gofloor: rank 1:", err)
			os.Exit(1)
		}
	}()
	return func() {
		stopping.Store(true)
		cmd.Process.Kill() // it has exited unless this rank failed first
		unpin()
	}, nil
}

// runPeer is rank 1: it reports its mean to rank 0 on the pipe.
func runPeer(mode, peer string, iters, size int) error {
	pin(1)
	var ex exchanger
	report := os.NewFile(3, "report")
	if mode == "tcp" {
		c, err := net.Dial("tcp", peer)
		if err != nil {
			return err
		}
		defer c.Close()
		if ex, err = newTCP(c); err != nil {
			return err
		}
	} else {
		f := os.NewFile(3, "mapping")
		report = os.NewFile(4, "report")
		mem, err := unix.Mmap(int(f.Fd()), 0, 4*slotBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		f.Close()
		if err != nil {
			return err
		}
		defer unix.Munmap(mem)
		ex = &shmExchange{mem: mem, rank: 1}
	}
	us, err := measure(ex, 1, iters, size)
	if err != nil {
		return err
	}
	var buf [8]byte
	binary.NativeEndian.PutUint64(buf[:], math.Float64bits(us))
	_, err = report.Write(buf[:])
	return err
}

// An exchanger sends out to the peer and receives as many bytes into in.
type exchanger interface {
	exchange(iter uint64, out, in []byte) error
}

// measure runs the iterations and returns the mean time of the timed ones,
// checking that every one brought the peer's bytes.
func measure(ex exchanger, rank, iters, size int) (float64, error) {
	out := bytes.Repeat([]byte{byte(rank + 1)}, size)
	in := make([]byte, size)
	want := byte(2 - rank)
	var start time.Time
	for i := range warmup + iters {
		if i == warmup {
			start = time.Now()
		}
		if err := ex.exchange(uint64(i)+1, out, in); err != nil {
			return 0, err
		}
		if in[0] != want || in[size-1] != want {
			return 0, fmt.Errorf("rank %d got bytes %d..%d in iteration %d, want %d", rank, in[0], in[size-1], i, want)
		}
	}
	return float64(time.Since(start).Nanoseconds()) / float64(iters) / 1e3, nil
}

// tcpExchange makes floor.c's two system calls per iteration, raw (as
// collkit's tcp transport makes its polls and small writes).
type tcpExchange struct {
	fd int
}

// newTCP takes c's socket (non-blocking, as Go's are); c stays open
// until the caller closes it after the exchanges.
func newTCP(c net.Conn) (*tcpExchange, error) {
	tc := c.(*net.TCPConn)
	if err := tc.SetNoDelay(true); err != nil {
		return nil, err
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	t := &tcpExchange{}
	if err := raw.Control(func(fd uintptr) { t.fd = int(fd) }); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *tcpExchange) exchange(_ uint64, out, in []byte) error {
	for done := 0; done < len(out); {
		n, _, errno := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(t.fd), uintptr(unsafe.Pointer(&out[done])), uintptr(len(out)-done))
		if errno != 0 && errno != syscall.EAGAIN {
			return fmt.Errorf("write: %w", errno)
		}
		if errno == 0 {
			done += int(n)
		}
	}
	for got := 0; got < len(in); {
		n, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(t.fd), uintptr(unsafe.Pointer(&in[got])), uintptr(len(in)-got), syscall.MSG_DONTWAIT, 0, 0)
		switch {
		case errno == 0 && n == 0:
			return fmt.Errorf("recv: peer closed")
		case errno == 0:
			got += int(n)
		case errno != syscall.EAGAIN:
			return fmt.Errorf("recv: %w", errno)
		}
	}
	return nil
}

// shmExchange is floor.c's shared mapping: rank r's slots are r*2 and
// r*2+1, alternating by iteration, so a rank never writes the slot its
// peer may still read. A slot is its iteration number and then the
// payload, so that up to 56 bytes ride on the number's cache line.
type shmExchange struct {
	mem  []byte
	rank int
}

func newMapping() (*os.File, []byte, error) {
	fd, err := unix.MemfdCreate("gofloor", 0)
	if err != nil {
		return nil, nil, err
	}
	f := os.NewFile(uintptr(fd), "gofloor")
	if err := f.Truncate(4 * slotBytes); err != nil {
		f.Close()
		return nil, nil, err
	}
	mem, err := unix.Mmap(fd, 0, 4*slotBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, mem, nil
}

func (s *shmExchange) slot(rank int, iter uint64) (*atomic.Uint64, []byte) {
	off := (rank*2 + int(iter&1)) * slotBytes
	return (*atomic.Uint64)(unsafe.Pointer(&s.mem[off])), s.mem[off+8 : off+slotBytes]
}

func (s *shmExchange) exchange(iter uint64, out, in []byte) error {
	mineIter, mine := s.slot(s.rank, iter)
	theirIter, theirs := s.slot(1-s.rank, iter)
	copy(mine, out)
	mineIter.Store(iter)
	for theirIter.Load() < iter {
	}
	copy(in, theirs)
	return nil
}

// pin binds this process to the rank-th CPU it may run on, as floor.c
// and mpirun --bind-to core do (with one CPU it leaves it), and returns
// what undoes it.
func pin(rank int) (undo func()) {
	var set unix.CPUSet
	if unix.SchedGetaffinity(0, &set) != nil || set.Count() < 2 {
		return func() {}
	}
	seen := 0
	for c := range len(set) * 64 {
		if !set.IsSet(c) {
			continue
		}
		if seen == rank {
			var one unix.CPUSet
			one.Set(c)
			unix.SchedSetaffinity(0, &one)
			break
		}
		seen++
	}
	return func() { unix.SchedSetaffinity(0, &set) }
}

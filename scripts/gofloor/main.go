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
// floor.c prints "floor ...". The two processes are this program started
// twice more; each binds itself to a core as collbench's ranks do
// (launch.BindCore) and runs with GOMAXPROCS 1, as they do when they
// match the cores. scripts/compare-mpi.sh runs it beside floor.c,
// collbench and Open MPI.
package main

import (
	"bytes"
	"cmp"
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

	"github.com/collkit/collkit/launch"
)

const (
	warmup   = 1000
	maxBytes = 4096
	line     = 64
	// rankEnv marks a rank's process and gives its rank; addrEnv is the
	// listener's address over tcp. A rank's file 3 is the listener (tcp)
	// or the shared mapping (shm), its file 4 the pipe it reports on.
	rankEnv = "GOFLOOR_RANK"
	addrEnv = "GOFLOOR_ADDR"
)

// slotBytes is one of a rank's two slots (an iteration number, then the
// payload), in whole cache lines.
const slotBytes = (8 + maxBytes + line - 1) / line * line

// mapBytes is the shared mapping: two slots for each rank.
const mapBytes = 4 * slotBytes

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
	if r, ok := os.LookupEnv(rankEnv); ok {
		rank, err := strconv.Atoi(r)
		if err != nil || rank < 0 || rank > 1 {
			return fmt.Errorf("%s=%q: want 0 or 1", rankEnv, r)
		}
		return runRank(args[0], rank, iters, size)
	}
	us, err := coordinate(args[0], iters, size)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "floor-go %s %d %.2f\n", args[0], size, us)
	return err
}

// coordinate starts the two ranks (this program again, one process each)
// and returns the slower one's mean. When one fails, it kills the other,
// which could otherwise wait for its peer forever (over shared memory).
func coordinate(mode string, iters, size int) (float64, error) {
	var shared *os.File
	addr := ""
	if mode == "tcp" {
		l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return 0, err
		}
		defer l.Close()
		if shared, err = l.File(); err != nil {
			return 0, err
		}
		addr = l.Addr().String()
	} else {
		fd, err := unix.MemfdCreate("gofloor", 0)
		if err != nil {
			return 0, err
		}
		shared = os.NewFile(uintptr(fd), "gofloor")
		if err := shared.Truncate(mapBytes); err != nil {
			shared.Close()
			return 0, err
		}
	}
	defer shared.Close()
	type result struct {
		us  float64
		err error
	}
	results := make(chan result, 2)
	var cmds []*exec.Cmd
	for rank := range 2 {
		rd, wr, err := os.Pipe()
		if err != nil {
			return 0, err
		}
		cmd := exec.Command(os.Args[0], mode, strconv.Itoa(iters), strconv.Itoa(size))
		cmd.Env = append(os.Environ(), rankEnv+"="+strconv.Itoa(rank), addrEnv+"="+addr)
		cmd.ExtraFiles = []*os.File{shared, wr}
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		err = cmd.Start()
		wr.Close()
		if err != nil {
			rd.Close()
			for _, c := range cmds {
				c.Process.Kill() // its goroutine below reaps it
			}
			return 0, err
		}
		cmds = append(cmds, cmd)
		go func() {
			defer rd.Close()
			var buf [8]byte
			_, err := io.ReadFull(rd, buf[:])
			if werr := cmd.Wait(); werr != nil || err != nil {
				results <- result{err: fmt.Errorf("rank %d: %w", rank, cmp.Or(werr, err))}
				return
			}
			results <- result{us: math.Float64frombits(binary.NativeEndian.Uint64(buf[:]))}
		}()
	}
	slowest := 0.0
	var err error
	for range cmds {
		r := <-results
		if r.err != nil && err == nil {
			err = r.err
			for _, c := range cmds {
				c.Process.Kill() // the other rank; this one has exited
			}
		}
		slowest = max(slowest, r.us)
	}
	return slowest, err
}

// runRank is one rank: it binds itself to its core, exchanges with the
// other and reports its mean on the pipe.
func runRank(mode string, rank, iters, size int) error {
	runtime.GOMAXPROCS(1)
	if _, err := launch.BindCore(rank); err != nil {
		return err
	}
	shared, report := os.NewFile(3, "shared"), os.NewFile(4, "report")
	var ex exchanger
	if mode == "tcp" {
		var c net.Conn
		var err error
		if rank == 0 {
			var l net.Listener
			if l, err = net.FileListener(shared); err == nil {
				c, err = l.Accept()
				l.Close()
			}
		} else {
			c, err = net.Dial("tcp", os.Getenv(addrEnv))
		}
		shared.Close()
		if err != nil {
			return err
		}
		defer c.Close()
		if ex, err = newTCP(c); err != nil {
			return err
		}
	} else {
		mem, err := unix.Mmap(int(shared.Fd()), 0, mapBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		shared.Close()
		if err != nil {
			return err
		}
		defer unix.Munmap(mem)
		ex = &shmExchange{mem: mem, rank: rank}
	}
	us, err := measure(ex, rank, iters, size)
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

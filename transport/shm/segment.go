//go:build linux

package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A segment is one rank's file in Config.Dir, mapped by every rank of the
// job. It holds the owner's header (pid, closed flag, barrier counter), the
// rings on which the owner receives, one per peer, and the owner's native
// all-reduce buffer.
//
//	page 0          header: magic, version, rank, size, ring bytes, native
//	                bytes, pid; then on cache lines of their own: closed,
//	                arrive (barrier counter), bwait (barrier futex, then
//	                the time a waker woke it: wokenAt); then
//	                the native all-reduce's two call slots (barrier word,
//	                header, small payload), alternating; the owner's abort
//	                reason; the owner's waits that went to sleep (waitSlots
//	                records of waitBytes: see note)
//	ctrl pages      one 256-byte control block per sender rank:
//	                head, tail, cwait, pwait (futex words, each followed by
//	                its wokenAt), each on its own cache line
//	ring data       RingBytes per sender rank (the owner's slot unused)
//	native          NativeBytes
const (
	segMagic   = 0x73746b6c6c6f63 // "collkts" little endian
	segVersion = 3

	offMagic       = 0
	offVersion     = 8
	offRank        = 12
	offSize        = 16
	offRingBytes   = 20
	offPid         = 24
	offNativeBytes = 32
	offCreated     = 40 // unix nanoseconds
	offClosed      = 64
	offArrive      = 128
	offBwait       = 192
	offSlots       = 256  // two of slotBytes
	offReason      = 1024 // u32 length, then an abort reason of up to transport.MaxAbortReason bytes
	offWaits       = 2112 // after the reason: waitSlots records of waitBytes
	slotBytes      = 256

	pageBytes = 4096
	lineBytes = 64  // a cache line: every word above that others poll has one of its own
	ctrlBytes = 256 // per ring: head, tail, cwait, pwait on lines of their own

	ctrlHead  = 0
	ctrlTail  = 64
	ctrlCwait = 128
	ctrlPwait = 192

	// segPrefix starts the name of every segment file, and is what
	// Reclaim looks for.
	segPrefix = "collkit-"
)

func roundPage(n int) int { return (n + pageBytes - 1) &^ (pageBytes - 1) }

// layout is where things are in the segments of a job; every rank's segment
// has the same layout.
type layout struct {
	size, ringBytes, nativeBytes int
}

func (l layout) ctrl(sender int) int { return pageBytes + sender*ctrlBytes }
func (l layout) dataStart() int      { return pageBytes + roundPage(l.size*ctrlBytes) }
func (l layout) data(sender int) int { return l.dataStart() + sender*l.ringBytes }
func (l layout) native() int         { return l.dataStart() + l.size*l.ringBytes }
func (l layout) total() int          { return l.native() + l.nativeBytes }

// JobBytes is how much of the segment directory a job of cfg.Size ranks
// with cfg's ring and native sizes takes: every rank's segment.
func JobBytes(cfg Config) (int, error) {
	cfg.Rank = 0
	c, err := cfg.withDefaults()
	if err != nil {
		return 0, err
	}
	return c.Size * layout{size: c.Size, ringBytes: c.RingBytes, nativeBytes: c.NativeBytes}.total(), nil
}

// Room is the size of the file system at dir in bytes, used or not: what
// every process that looks sees alike.
func Room(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Blocks) * st.Bsize, nil
}

// segment is one mapped segment file.
type segment struct {
	path string
	mem  []byte
}

func (s *segment) u32(off int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&s.mem[off]))
}

func (s *segment) u64(off int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&s.mem[off]))
}

func (s *segment) pid() int { return int(s.u64(offPid).Load()) }

func (s *segment) closed() bool { return s.u32(offClosed).Load() != 0 }

func (s *segment) unmap() error {
	if s.mem == nil {
		return nil
	}
	err := unix.Munmap(s.mem)
	s.mem = nil
	return err
}

// createSegment makes the segment file of rank, maps it and writes its
// header. The file is created exclusively: a name already taken is an error.
func createSegment(path string, rank int, l layout) (*segment, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("creating segment %s: %w", path, err)
	}
	defer unix.Close(fd)
	fail := func(what string, err error) (*segment, error) {
		unix.Unlink(path)
		return nil, fmt.Errorf("%s segment %s (%d bytes; is %s full or too small?): %w",
			what, path, l.total(), filepath.Dir(path), err)
	}
	if err := unix.Ftruncate(fd, int64(l.total())); err != nil {
		return fail("sizing", err)
	}
	// Take the pages now: a tmpfs too full for them then fails here, with
	// this error, rather than with SIGBUS at the first message that
	// touches one (a container's 64 MiB /dev/shm, for example).
	if err := unix.Fallocate(fd, 0, 0, int64(l.total())); err != nil && err != unix.EOPNOTSUPP {
		return fail("allocating", err)
	}
	mem, err := unix.Mmap(fd, 0, l.total(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mapping", err)
	}
	s := &segment{path: path, mem: mem}
	binary.LittleEndian.PutUint32(mem[offVersion:], segVersion)
	binary.LittleEndian.PutUint32(mem[offRank:], uint32(rank))
	binary.LittleEndian.PutUint32(mem[offSize:], uint32(l.size))
	binary.LittleEndian.PutUint32(mem[offRingBytes:], uint32(l.ringBytes))
	binary.LittleEndian.PutUint64(mem[offNativeBytes:], uint64(l.nativeBytes))
	binary.LittleEndian.PutUint64(mem[offCreated:], uint64(time.Now().UnixNano()))
	s.u64(offPid).Store(uint64(os.Getpid()))
	s.u64(offMagic).Store(segMagic) // last: a valid magic means a complete header
	return s, nil
}

// openSegment maps the segment of rank, made by a peer, and checks that its
// header describes the same job layout.
func openSegment(path string, rank int, l layout) (*segment, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening segment %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat of segment %s: %w", path, err)
	}
	if st.Size != int64(l.total()) {
		return nil, fmt.Errorf("segment %s is %d bytes, want %d: the ranks disagree on Size, RingBytes or NativeBytes",
			path, st.Size, l.total())
	}
	mem, err := unix.Mmap(fd, 0, l.total(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping segment %s: %w", path, err)
	}
	s := &segment{path: path, mem: mem}
	le := binary.LittleEndian
	switch {
	case s.u64(offMagic).Load() != segMagic:
		err = fmt.Errorf("segment %s has no collkit header", path)
	case le.Uint32(mem[offVersion:]) != segVersion:
		err = fmt.Errorf("segment %s has layout version %d, this build uses %d: all ranks must run the same collkit",
			path, le.Uint32(mem[offVersion:]), segVersion)
	case int(le.Uint32(mem[offRank:])) != rank || int(le.Uint32(mem[offSize:])) != l.size:
		err = fmt.Errorf("segment %s belongs to rank %d of %d, want rank %d of %d",
			path, le.Uint32(mem[offRank:]), le.Uint32(mem[offSize:]), rank, l.size)
	case int(le.Uint32(mem[offRingBytes:])) != l.ringBytes || int(le.Uint64(mem[offNativeBytes:])) != l.nativeBytes:
		err = fmt.Errorf("segment %s has rings of %d bytes and a native buffer of %d, this rank %d and %d: every rank must use the same Config.RingBytes and NativeBytes",
			path, le.Uint32(mem[offRingBytes:]), le.Uint64(mem[offNativeBytes:]), l.ringBytes, l.nativeBytes)
	}
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	return s, nil
}

// alive reports whether process pid exists. EPERM means it exists under
// another user.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// staleAge is how old a segment without a complete header must be before
// Reclaim takes it for the remains of a crash during creation.
const staleAge = time.Minute

// Reclaim removes the segments in dir (empty means /dev/shm) whose owner
// process no longer exists: what a crashed job left behind. Segments of
// live processes are kept. It returns the paths it removed. Connect calls
// it, so a job cleans up after an earlier crashed one on its next start.
func Reclaim(dir string) ([]string, error) {
	if dir == "" {
		dir = DefaultDir
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("shm: reclaiming stale segments: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), segPrefix) || !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		stale, err := isStale(path)
		if err != nil || !stale {
			continue // gone already, or not ours to judge
		}
		if err := unix.Unlink(path); err != nil {
			if !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("removing stale segment %s: %w", path, err))
			}
			continue
		}
		removed = append(removed, path)
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("shm: %w", err)
	}
	return removed, nil
}

// isStale reads a segment's header: stale when its owner is dead, or when
// it never got a complete header and is older than staleAge.
func isStale(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	var hdr [64]byte
	n, _ := f.ReadAt(hdr[:], 0)
	le := binary.LittleEndian
	if n < len(hdr) || le.Uint64(hdr[offMagic:]) != segMagic {
		st, err := f.Stat()
		return err == nil && time.Since(st.ModTime()) > staleAge, nil
	}
	return !alive(int(le.Uint64(hdr[offPid:]))), nil
}

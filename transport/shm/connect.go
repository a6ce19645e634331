//go:build linux

package shm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/internal/spin"
	"golang.org/x/sys/unix"
)

// Connect sets the job's segments up through store: it removes stale
// segments of dead processes from Config.Dir (see Reclaim), learns from
// rank 0 a random name for this job's segments (key "<Prefix>/name"),
// creates this rank's segment, waits until every rank has created its own
// ("<Prefix>/created/<rank>", the value is the pid), maps them all, and
// once every rank has mapped every segment ("<Prefix>/mapped/<rank>")
// removes its own file: the mappings live on, and nothing is left in
// Config.Dir even if the job crashes later.
//
// ctx bounds the whole setup. A rank on another host fails here with an
// error saying so: every rank of a shm transport must share the host.
// After an error the Transport cannot be used; Close it.
func (t *Transport) Connect(ctx context.Context, store bootstrap.Store) (err error) {
	t.setup.Lock()
	switch {
	case t.closed.Load():
		t.setup.Unlock()
		return fmt.Errorf("shm: rank %d connect: %w", t.cfg.Rank, errClosed)
	case t.started:
		t.setup.Unlock()
		return fmt.Errorf("shm: rank %d: Connect called twice; make a new Transport to connect again", t.cfg.Rank)
	}
	t.started = true
	ctx, cancel := context.WithCancel(ctx)
	t.cancel = cancel
	t.setup.Unlock()
	defer cancel()

	segs, name, err := t.connect(ctx, store)
	if err != nil {
		for _, s := range segs {
			if s != nil {
				s.unmap()
			}
		}
		if t.closed.Load() {
			return fmt.Errorf("shm: rank %d connect: closed while connecting: %w", t.cfg.Rank, err)
		}
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() {
		for _, s := range segs {
			if s != nil {
				s.unmap()
			}
		}
		return fmt.Errorf("shm: rank %d connect: transport closed", t.cfg.Rank)
	}
	t.segs, t.name = segs, name
	t.native.wait = spin.Fixed(t.cfg.Yield)
	t.peers = make([]*peer, t.cfg.Size)
	own := segs[t.cfg.Rank]
	for r, s := range segs {
		if r == t.cfg.Rank {
			continue
		}
		pid := s.pid()
		t.peers[r] = &peer{
			rank: r, seg: s, pid: pid,
			checkPid: alive(pid), // invisible from here: another pid namespace
			in:       t.newRing(own, t.lay, r),
			out:      t.newRing(s, t.lay, t.cfg.Rank),
			inWait:   spin.Fixed(t.cfg.Yield),
			outWait:  spin.Fixed(t.cfg.Yield),
		}
		t.peers[r].in.mine = t.peers[r].in.tail.Load()
		t.peers[r].out.mine = t.peers[r].out.head.Load()
	}
	if err := t.chooseStores(ctx); err != nil {
		return fmt.Errorf("shm: rank %d connect: %w", t.cfg.Rank, err)
	}
	t.watchExits()
	t.connected.Store(true)
	return nil
}

func (t *Transport) connect(ctx context.Context, store bootstrap.Store) (segs []*segment, name string, err error) {
	cfg := t.cfg
	segs = make([]*segment, cfg.Size)
	if cfg.Size == 1 {
		// Nothing to share, but the native all-reduce still wants a
		// segment of its own: keep it private.
		mem, err := unix.Mmap(-1, 0, t.lay.total(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
		if err != nil {
			return segs, "", fmt.Errorf("shm: rank 0: mapping %d bytes: %w", t.lay.total(), err)
		}
		segs[0] = &segment{mem: mem}
		return segs, "solo", nil
	}
	// Best effort: what a crashed job left is removed, but this job's
	// names are fresh either way.
	_, _ = Reclaim(cfg.Dir)
	nameKey := cfg.Prefix + "/name"
	if cfg.Rank == 0 {
		var b [8]byte
		rand.Read(b[:])
		name = hex.EncodeToString(b[:])
		if err := store.Set(ctx, nameKey, []byte(name)); err != nil {
			return segs, "", fmt.Errorf("shm: rank 0: publishing the segment name: %w", err)
		}
	} else {
		v, err := store.Get(ctx, nameKey)
		if err != nil {
			return segs, "", fmt.Errorf("shm: rank %d: waiting for rank 0 to name the segments (key %q): %w", cfg.Rank, nameKey, err)
		}
		name = string(v)
	}
	path := func(r int) string { return filepath.Join(cfg.Dir, segPrefix+name+"-"+strconv.Itoa(r)) }

	own, err := createSegment(path(cfg.Rank), cfg.Rank, t.lay)
	if err != nil {
		return segs, name, fmt.Errorf("shm: rank %d: %w", cfg.Rank, err)
	}
	segs[cfg.Rank] = own
	removeOwn := sync.OnceFunc(func() { os.Remove(own.path) })
	defer func() {
		if err != nil {
			removeOwn()
		}
	}()
	pids, err := bootstrap.Exchange(ctx, store, cfg.Prefix+"/created", cfg.Rank, cfg.Size, []byte(strconv.Itoa(os.Getpid())))
	if err != nil {
		return segs, name, fmt.Errorf("shm: rank %d: waiting for the other ranks to create their segments: %w", cfg.Rank, err)
	}
	for r := range cfg.Size {
		if r == cfg.Rank {
			continue
		}
		s, err := openSegment(path(r), r, t.lay)
		if errors.Is(err, unix.ENOENT) {
			err = fmt.Errorf("%w: rank %d (pid %s) created it, but not on this host, or not in the same %s: "+
				"the shm transport needs every rank on one host (use tcp, or hierarchical with shm inside each node)",
				err, r, pids[r], cfg.Dir)
		}
		if err != nil {
			return segs, name, fmt.Errorf("shm: rank %d: %w", cfg.Rank, err)
		}
		segs[r] = s
	}
	if err := bootstrap.Barrier(ctx, store, cfg.Prefix+"/mapped", cfg.Rank, cfg.Size); err != nil {
		return segs, name, fmt.Errorf("shm: rank %d: waiting for the other ranks to map the segments: %w", cfg.Rank, err)
	}
	removeOwn()
	return segs, name, nil
}

// Local connects size ranks inside this process through shared memory, for
// tests and benchmarks. cfg's Rank and Size are ignored.
func Local(ctx context.Context, size int, cfg Config) ([]*Transport, error) {
	return bootstrap.ConnectLocal(ctx, size, func(r int) (*Transport, error) {
		cfg.Rank, cfg.Size = r, size
		return New(cfg)
	})
}

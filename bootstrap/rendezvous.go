package bootstrap

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Rendezvous is RendezvousWith with the zero RendezvousConfig: it waits
// without logging.
func Rendezvous(ctx context.Context, env Env) (Store, *Closer, error) {
	return RendezvousWith(ctx, env, RendezvousConfig{})
}

// DefaultProgress is how often Rendezvous logs while it waits, when
// RendezvousConfig.Progress is zero.
const DefaultProgress = 5 * time.Second

// RendezvousConfig adjusts RendezvousWith. The zero value is ready to use.
type RendezvousConfig struct {
	// Log receives a line at INFO every Progress while this rank waits for
	// the store to come up or for the other ranks to join, naming the
	// missing ranks and the store's address. Nil means silent.
	Log *slog.Logger
	// Progress is the interval between those lines. Zero means
	// DefaultProgress.
	Progress time.Duration
}

// RendezvousWith connects this process to its job's store and waits until
// every rank of the job has joined it: rank 0 starts a Server listening on
// env.MasterAddr:env.MasterPort (unless env.StoreExternal says a launcher
// already hosts one), and every rank, rank 0 included, dials it and
// registers its Identity. ctx bounds all of it; give it a deadline.
//
// It fails at once, on every rank still waiting, when ranks disagree on the
// world size (ErrSizeMismatch) or two processes claim one rank
// (ErrDuplicateRank); a process of another job is turned away
// (ErrJobMismatch) while the job's own ranks wait on. When ctx ends first
// the error wraps ErrMissingRanks and names the ranks that never came, and
// rank 0, before it stops its store, hands that error to the ranks still
// waiting.
//
// With env.Store set (COLLKIT_STORE=etcd://...), the ranks meet in that
// store instead and no rank hosts anything: they check each other through
// the store's Create and Add, with the same errors (see claim.go), and any
// rank that gives up stops the rendezvous for the others. The program must
// import the store's package (bootstrap/etcdstore) for its scheme.
//
// Closing the returned Closer drops the client. On rank 0 it then waits,
// up to ShutdownGrace, until every other rank has closed its client too
// before it stops the server, so a rank still reading its last keys is not
// cut off; make sure the other ranks close theirs (or exit), or use
// Closer.Shutdown or Closer.Abort to wait less.
func RendezvousWith(ctx context.Context, env Env, cfg RendezvousConfig) (Store, *Closer, error) {
	if env.Size < 1 || env.Rank < 0 || env.Rank >= env.Size {
		return nil, nil, fmt.Errorf("bootstrap: rank %d of %d is not a valid place in a job", env.Rank, env.Size)
	}
	start := time.Now()
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	every := cmp.Or(cfg.Progress, DefaultProgress)
	if env.Store != "" {
		return rendezvousStore(ctx, env, log, every, start)
	}
	addr := env.StoreAddr()
	var srv *Server
	if env.Rank == 0 && !env.StoreExternal {
		var err error
		if srv, err = listenOn(ctx, env.MasterAddr, env.MasterPort, secretBytes(env.Secret), env.JobID); err != nil {
			return nil, nil, err
		}
		addr = srv.Addr()
	}
	stop := tick(every, func() {
		log.Info("bootstrap: waiting for the store to come up (rank 0, or the launcher, hosts it)",
			"store", addr, "waited", time.Since(start).Round(time.Second))
	})
	c, err := DialConfig(ctx, ClientConfig{Addr: addr, Secret: secretBytes(env.Secret)})
	stop()
	if err != nil {
		if srv != nil {
			srv.Close()
		}
		return nil, nil, err
	}
	cl := &Closer{c: c, srv: srv}
	fail := func(err error) (Store, *Closer, error) {
		cl.Abort(fmt.Errorf("rank %d gave up: %w", env.Rank, err))
		return nil, nil, err
	}
	if err := c.Register(ctx, NewIdentity(env)); err != nil {
		return fail(err)
	}
	if err := c.awaitRoster(ctx, env, log, every, start); err != nil {
		return fail(err)
	}
	log.Debug("bootstrap: every rank joined the store", "store", addr, "size", env.Size, "waited", time.Since(start).Round(time.Millisecond))
	return c, cl, nil
}

// LoudWait is how long a rank waits for the others silently when its logger
// is off (COLLKIT_DEBUG unset): from then on, and every LoudWait after, it
// says who is missing through the process's default logger (slog.Default),
// so that a rank waiting for a rank that never comes is never silent.
const LoudWait = 30 * time.Second

// awaitRoster waits until every rank has registered, logging who is
// missing every interval (see LoudWait for a logger that is off).
func (c *Client) awaitRoster(ctx context.Context, env Env, log *slog.Logger, every time.Duration, start time.Time) error {
	done := make(chan error, 1)
	go func() {
		_, err := c.Get(ctx, rosterKey)
		done <- err
	}()
	t := time.NewTicker(every)
	defer t.Stop()
	lastLoud := time.Duration(0)
	for {
		select {
		case err := <-done:
			if err == nil || ctx.Err() == nil {
				return err // complete, or the store stopped the rendezvous
			}
			return c.missing(ctx, env, start)
		case <-t.C:
			waited := time.Since(start)
			verbose := log.Enabled(ctx, slog.LevelInfo)
			loud := !verbose && waited-lastLoud >= LoudWait
			if !verbose && !loud {
				continue
			}
			r, err := c.Roster(ctx)
			if err != nil {
				continue // the Get sees it too
			}
			args := []any{"store", c.addr, "missing", r.missingText(), "joined", r.Joined, "size", r.Size,
				"waited", waited.Round(time.Second)}
			if len(r.TurnedAway) > 0 {
				args = append(args, "turned_away", r.turnedAwayText()[2:])
			}
			if verbose {
				log.Info("bootstrap: waiting for ranks to join the store", args...)
				continue
			}
			lastLoud = waited
			slog.Warn("collkit: still waiting for ranks to join the store (COLLKIT_DEBUG=INFO logs this every few seconds)",
				append([]any{"rank", env.Rank}, args...)...)
		}
	}
}

// missing is the error of a rendezvous whose ctx ended: it asks the store
// (briefly) who is missing.
func (c *Client) missing(ctx context.Context, env Env, start time.Time) error {
	waited := time.Since(start).Round(time.Millisecond)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	r, err := c.Roster(rctx)
	if err != nil {
		return fmt.Errorf("%w: not every rank joined the store at %s within %v (%w%s), and the store did not say which are missing: %w; "+
			"look at the other ranks' output", ErrMissingRanks, c.addr, waited, ctx.Err(), causeOf(ctx), err)
	}
	return missingError(ctx, r, c.addr, "MASTER_ADDR:MASTER_PORT set to "+c.addr, env.Size, waited)
}

// missingError is the error of a rendezvous at store where whose ctx ended
// after waited with r's ranks missing; join says how a rank finds the
// store.
func missingError(ctx context.Context, r Roster, where, join string, size int, waited time.Duration) error {
	return fmt.Errorf("%w: %s did not join the store at %s within %v (%w%s)%s; "+
		"start the missing ranks with %s and world size %d, "+
		"or look at their output for why they did not start or could not reach the store",
		ErrMissingRanks, r.missingText(), where, waited, ctx.Err(), causeOf(ctx), r.turnedAwayText(), join, size)
}

// causeOf is ": " and the cause of ctx's end when it says more than
// ctx.Err(), such as which timeout passed; else "".
func causeOf(ctx context.Context) string {
	if c := context.Cause(ctx); c != nil && c != ctx.Err() {
		return ": " + c.Error()
	}
	return ""
}

// tick calls fn every d until the returned stop is called.
func tick(d time.Duration, fn func()) (stop func()) {
	t := time.NewTicker(d)
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-t.C:
				fn()
			case <-quit:
				return
			}
		}
	})
	return func() {
		t.Stop()
		close(quit)
		wg.Wait()
	}
}

// Closer ends this rank's use of the job's store: it drops the client
// and, on rank 0, stops the store server. With an external store
// (COLLKIT_STORE) it drops this rank's connection only: the store and the
// job's keys stay.
type Closer struct {
	c   *Client
	srv *Server
	// An external store's rendezvous and connection; nil with the TCP store.
	ext      *storeRendezvous
	extClose io.Closer
}

// ShutdownGrace bounds how long rank 0's Closer.Close waits for the other
// ranks to disconnect from its store.
const ShutdownGrace = 10 * time.Second

// AbortGrace bounds how long rank 0's Closer.Abort waits for the ranks
// still connected to read the reason and disconnect.
const AbortGrace = time.Second

// Close drops the client; on rank 0 it then waits up to ShutdownGrace for
// the other ranks to disconnect before it stops the server.
func (cl *Closer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	return cl.Shutdown(ctx)
}

// Shutdown is Close with the wait for the other ranks bounded by ctx
// instead of ShutdownGrace.
//
// On rank 0 its error includes a *StoreError when two processes claimed
// one rank, or ranks disagreed on the world size, after every rank had
// joined: the ranks past their setup went on without hearing of it, and
// one of them may have been a process of another job.
func (cl *Closer) Shutdown(ctx context.Context) error {
	if cl.ext != nil {
		return cl.closeExt(nil)
	}
	err := cl.c.Close()
	if cl.srv != nil {
		err = errors.Join(err, cl.srv.Shutdown(ctx), cl.srv.lateConflict())
	}
	return err
}

// Abort is Close after a failure. On rank 0 it first stops the
// rendezvous with reason, so that every rank still waiting on the store
// fails at once quoting it (ErrSetupFailed, or ErrMissingRanks when reason
// wraps that), and then waits at most AbortGrace for them; a rank that is
// stuck or stopped does not hold it up longer.
func (cl *Closer) Abort(reason error) error {
	if reason == nil {
		reason = errors.New("no reason given")
	}
	if cl.ext != nil {
		return cl.closeExt(reason)
	}
	if cl.srv != nil {
		code := codeFailed
		if errors.Is(reason, ErrMissingRanks) {
			code = codeMissing
		}
		cl.srv.abort(code, reason.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), AbortGrace)
	defer cancel()
	err := cl.c.Close()
	if cl.srv != nil {
		cl.srv.Shutdown(ctx) // a deadline here is expected: peers may be gone
	}
	return err
}

// listenOn starts a Server on host:port, resolving host when it is a name
// and trying its addresses in turn.
func listenOn(ctx context.Context, host string, port int, secret []byte, jobID string) (*Server, error) {
	ips := []string{host}
	if net.ParseIP(host) == nil {
		addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("bootstrap: rank 0 cannot resolve MASTER_ADDR=%q: %w; set MASTER_ADDR to this host's IP address", host, err)
		}
		ips = ips[:0]
		for _, a := range addrs {
			ips = append(ips, a.IP.String())
		}
	}
	var errs []error
	for _, ip := range ips {
		srv, err := ListenConfig(ServerConfig{Addr: net.JoinHostPort(ip, strconv.Itoa(port)), Secret: secret, JobID: jobID})
		if err == nil {
			return srv, nil
		}
		errs = append(errs, err)
	}
	err := errors.Join(errs...)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("%w; port %d is taken, perhaps by another job or an earlier run: choose another MASTER_PORT", err, port)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return nil, fmt.Errorf("%w; MASTER_ADDR=%s is not an address of this host: start rank 0 on the host MASTER_ADDR names, or point MASTER_ADDR at this host", err, host)
	}
	return nil, err
}

// LocalAddrFor returns the IP address of this host's interface that routes
// to remote ("host" or "host:port"), for advertising an address other ranks
// can reach. It sends no packets. When the route cannot be found it returns
// "127.0.0.1".
func LocalAddrFor(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	c, err := net.Dial("udp", net.JoinHostPort(host, "9"))
	if err != nil {
		return "127.0.0.1"
	}
	defer c.Close()
	a, ok := c.LocalAddr().(*net.UDPAddr)
	if !ok || a.IP.IsUnspecified() {
		return "127.0.0.1"
	}
	return a.IP.String()
}

// Exchange publishes value under prefix/rank and returns every rank's value,
// indexed by rank, once all size ranks have published theirs. Each exchange
// needs its own prefix, since keys are written once. It waits for the
// others' keys together (GetMany): over a store with a network round trip
// per read (etcd), one rank's wait is then a round trip or two, not one per
// rank.
func Exchange(ctx context.Context, s Store, prefix string, rank, size int, value []byte) ([][]byte, error) {
	if rank < 0 || rank >= size {
		return nil, fmt.Errorf("bootstrap: exchange %q: rank %d is outside a job of %d ranks", prefix, rank, size)
	}
	key := func(r int) string { return prefix + "/" + strconv.Itoa(r) }
	if err := s.Set(ctx, key(rank), value); err != nil {
		return nil, fmt.Errorf("bootstrap: exchange %q: publishing rank %d: %w", prefix, rank, err)
	}
	keys := make([]string, 0, size-1)
	for r := range size {
		if r != rank {
			keys = append(keys, key(r))
		}
	}
	vals, err := GetMany(ctx, s, keys)
	if err != nil {
		var me *MissingKeyError
		if errors.As(err, &me) {
			r := me.Index
			if r >= rank {
				r++
			}
			return nil, fmt.Errorf("bootstrap: exchange %q: waiting for rank %d (key %q): %w", prefix, r, key(r), me.Err)
		}
		return nil, fmt.Errorf("bootstrap: exchange %q: %w", prefix, err)
	}
	return slices.Insert(vals, rank, append([]byte{}, value...)), nil
}

// MissingKeyError is GetMany's error when waiting for one of its keys
// failed: Index is that key's place in the list.
type MissingKeyError struct {
	Index int
	Key   string
	Err   error
}

func (e *MissingKeyError) Error() string { return fmt.Sprintf("waiting for key %q: %v", e.Key, e.Err) }
func (e *MissingKeyError) Unwrap() error { return e.Err }

// GetMany returns the values of keys, in order, once every key has one, or
// a *MissingKeyError: through s's own GetMany (MultiGetter), or with up to
// getManyParallel Gets at once.
func GetMany(ctx context.Context, s Store, keys []string) ([][]byte, error) {
	if m, ok := s.(MultiGetter); ok {
		return m.GetMany(ctx, keys)
	}
	out := make([][]byte, len(keys))
	errs := make([]error, len(keys))
	gets, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var once sync.Once
	failed := -1 // the key whose Get failed first, unless ctx ended
	slots := make(chan struct{}, getManyParallel)
	for i, k := range keys {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if out[i], errs[i] = s.Get(gets, k); errs[i] != nil {
				once.Do(func() { failed = i })
				cancel() // the call fails: stop waiting for the others
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil { // every missing key timed out alike: name the first
		failed = slices.IndexFunc(errs, func(err error) bool { return err != nil })
	}
	if failed >= 0 {
		return nil, &MissingKeyError{Index: failed, Key: keys[failed], Err: errs[failed]}
	}
	return out, nil
}

// Watch reports keys to found as they get values (see Watcher): through
// s's own Watch, or with a Get per key, all at once, since a key that never
// comes must not hold up the others.
func Watch(ctx context.Context, s Store, keys []string, found func(i int, value []byte) bool) error {
	if w, ok := s.(Watcher); ok {
		return w.Watch(ctx, keys, found)
	}
	type got struct {
		i   int
		v   []byte
		err error
	}
	results := make(chan got, len(keys))
	var wg sync.WaitGroup
	defer wg.Wait()
	gets, cancel := context.WithCancel(ctx)
	defer cancel() // before the Wait: found may stop it before every key came
	for i, k := range keys {
		wg.Go(func() {
			v, err := s.Get(gets, k)
			results <- got{i, v, err}
		})
	}
	for range keys {
		r := <-results
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case r.err != nil:
			return r.err
		case !found(r.i, r.v):
			return nil
		}
	}
	return nil
}

// getManyParallel is how many keys GetMany waits for at once.
const getManyParallel = 32

// Barrier returns once all size ranks have called it with the same prefix,
// or when ctx ends. Each barrier needs its own prefix.
func Barrier(ctx context.Context, s Store, prefix string, rank, size int) error {
	_, err := Exchange(ctx, s, prefix, rank, size, nil)
	return err
}

// secretBytes is s as a secret: nil (no authentication) when empty.
func secretBytes(s string) []byte {
	if s == "" {
		return nil
	}
	return []byte(s)
}

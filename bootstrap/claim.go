package bootstrap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
)

// A job whose store is outside it (COLLKIT_STORE) has no server to check
// registrations, so its ranks check each other through the store's atomic
// operations, with the same outcomes and errors as the TCP store's
// rendezvous (register.go):
//
//   - The first rank to Create sizeKey fixes the job's world size and id; a
//     rank of another size stops the rendezvous (ErrSizeMismatch), a process
//     of another job is turned away (ErrJobMismatch).
//   - Each rank Creates its rank key with its Identity; a second process
//     claiming it stops the rendezvous (ErrDuplicateRank).
//   - Each rank then Adds one to joinedKey; the rank that brings it to the
//     world size sets rosterKey, which every rank waits for.
//   - A rank that stops the rendezvous, or gives up, Creates failedKey with
//     why; every rank waits for it too, and fails at once quoting it.
//
// Nothing lives in any rank: the job's keys stay in the store.
const (
	sizeKey       = reservedPrefix + "size"
	rankKeyPrefix = reservedPrefix + "rank/"
	joinedKey     = reservedPrefix + "joined"
	failedKey     = reservedPrefix + "failed"
)

// claim is what a rank writes to sizeKey and its rank key.
type claim struct {
	Identity
	At time.Time `json:"at"`
}

// storeFailure is failedKey's value.
type storeFailure struct {
	Code string `json:"code"`
	Msg  string `json:"msg"`
}

// storeRendezvous is one rank's rendezvous through an external store.
type storeRendezvous struct {
	s     Store
	where string // the store's URL, for messages
	env   Env
	me    claim
}

func storeMeeting() meeting {
	return meeting{shared: "one COLLKIT_STORE prefix", own: "its own prefix in COLLKIT_STORE (etcd://host:port/prefix)"}
}

// rendezvousStore is RendezvousWith for a job whose store is env.Store.
func rendezvousStore(ctx context.Context, env Env, log *slog.Logger, every time.Duration, start time.Time) (Store, *Closer, error) {
	u, s, c, err := openStore(ctx, env)
	if err != nil {
		return nil, nil, err
	}
	r := &storeRendezvous{s: s, where: u.String(), env: env, me: claim{NewIdentity(env), time.Now()}}
	if err := r.join(ctx, log, every, start); err != nil {
		var se *StoreError
		if !errors.As(err, &se) { // a StoreError was published already, or is this process's alone
			code := codeFailed
			if errors.Is(err, ErrMissingRanks) {
				code = codeMissing
			}
			r.stop(code, fmt.Sprintf("rank %d gave up: %v", env.Rank, err))
		}
		c.Close()
		return nil, nil, err
	}
	log.Debug("bootstrap: every rank joined the store", "store", r.where, "size", env.Size, "waited", time.Since(start).Round(time.Millisecond))
	return s, &Closer{ext: r, extClose: c}, nil
}

func (r *storeRendezvous) join(ctx context.Context, log *slog.Logger, every time.Duration, start time.Time) error {
	me, err := json.Marshal(r.me)
	if err != nil {
		return err
	}
	first, err := r.create(ctx, sizeKey, me)
	if err != nil {
		return err
	}
	if first.JobID != r.me.JobID {
		return &StoreError{Addr: r.where, Err: ErrJobMismatch,
			Detail: storeMeeting().jobText(fmt.Sprintf("%q (its %s)", first.JobID, first.Identity), r.me.Identity)}
	}
	if first.Size != r.me.Size {
		return r.stop(codeSize, sizeText(r.me.Identity, first.Identity))
	}
	holder, err := r.create(ctx, rankKeyPrefix+strconv.Itoa(r.env.Rank), me)
	if err != nil {
		return err
	}
	if holder.Nonce != r.me.Nonce {
		return r.stop(codeDuplicate, storeMeeting().duplicateText(holder.Identity, r.me.Identity, r.me.At.Sub(holder.At)))
	}
	n, err := Add(ctx, r.s, joinedKey, 1)
	if err != nil {
		return fmt.Errorf("bootstrap: rank %d counting itself in the store %s: %w", r.env.Rank, r.where, err)
	}
	if n == int64(r.env.Size) {
		if err := r.s.Set(ctx, rosterKey, []byte(strconv.Itoa(r.env.Size))); err != nil {
			return fmt.Errorf("bootstrap: rank %d, the last to join, marking the rendezvous complete in %s: %w", r.env.Rank, r.where, err)
		}
	}
	return r.await(ctx, log, every, start)
}

// await waits until rosterKey or failedKey is set, or ctx ends.
func (r *storeRendezvous) await(ctx context.Context, log *slog.Logger, every time.Duration, start time.Time) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	complete, failed := make(chan error, 1), make(chan []byte, 1)
	go func() {
		_, err := r.s.Get(wctx, rosterKey)
		complete <- err
	}()
	go func() {
		if v, err := r.s.Get(wctx, failedKey); err == nil {
			failed <- v
		}
	}()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case err := <-complete:
			if err == nil {
				return nil
			}
			if ctx.Err() == nil {
				return fmt.Errorf("bootstrap: rank %d waiting for the other ranks in %s: %w", r.env.Rank, r.where, err)
			}
			return r.missing(ctx, time.Since(start))
		case v := <-failed:
			return r.failure(v)
		case <-t.C:
			if log.Enabled(ctx, slog.LevelInfo) {
				joined, err := Add(ctx, r.s, joinedKey, 0)
				if err == nil {
					log.Info("bootstrap: waiting for ranks to join the store", "store", r.where, "joined", joined,
						"size", r.env.Size, "waited", time.Since(start).Round(time.Second))
				}
			}
		}
	}
}

// create is Create of a claim, decoded.
func (r *storeRendezvous) create(ctx context.Context, key string, me []byte) (claim, error) {
	v, err := Create(ctx, r.s, key, me)
	if err != nil {
		return claim{}, fmt.Errorf("bootstrap: rank %d registering in the store %s: %w", r.env.Rank, r.where, err)
	}
	var c claim
	if err := json.Unmarshal(v, &c); err == nil {
		err = c.validate()
	}
	if err != nil {
		return claim{}, fmt.Errorf("bootstrap: key %q in the store %s holds %q, not a rank's claim: "+
			"the prefix is used by something other than a collkit job; give the job its own prefix", key, r.where, v)
	}
	return c, nil
}

// stop stops the rendezvous of every rank with msg, unless another rank
// stopped it first, and returns the error that stopped it.
func (r *storeRendezvous) stop(code, msg string) error {
	ctx, cancel := context.WithTimeout(context.Background(), AbortGrace)
	defer cancel()
	b, _ := json.Marshal(storeFailure{Code: code, Msg: msg}) // two strings always encode
	v, err := Create(ctx, r.s, failedKey, b)
	if err != nil { // the ranks still waiting time out instead
		return &StoreError{Addr: r.where, Err: codeErrors[code], Detail: msg + fmt.Sprintf(" (telling the other ranks failed: %v)", err)}
	}
	return r.failure(v)
}

// failure is the error failedKey's value v stands for.
func (r *storeRendezvous) failure(v []byte) error {
	var f storeFailure
	if err := json.Unmarshal(v, &f); err != nil || codeErrors[f.Code] == nil {
		return &StoreError{Addr: r.where, Err: ErrSetupFailed, Detail: fmt.Sprintf("a rank stopped the rendezvous: %q", v)}
	}
	return &StoreError{Addr: r.where, Err: codeErrors[f.Code], Detail: f.Msg}
}

// missing is the error of a rendezvous whose ctx ended: it looks up every
// rank's key, briefly, to name the missing ones.
func (r *storeRendezvous) missing(ctx context.Context, waited time.Duration) error {
	const probe, parallel = time.Second, 64
	size := r.env.Size
	found := make([]bool, size)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for rank := range size {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), probe)
			defer cancel()
			_, err := r.s.Get(pctx, rankKeyPrefix+strconv.Itoa(rank))
			found[rank] = err == nil
		})
	}
	wg.Wait()
	ro := Roster{JobID: r.env.JobID, Size: size}
	for rank, ok := range found {
		switch {
		case ok:
			ro.Joined++
		case len(ro.Missing) < maxMissingListed:
			ro.Missing = append(ro.Missing, rank)
			fallthrough
		default:
			ro.MissingCount++
		}
	}
	return missingError(ctx, ro, r.where, "COLLKIT_STORE="+r.where, size, waited.Round(time.Millisecond))
}

// closeExt ends this process's use of an external store; on abort it first
// stops the rendezvous for the ranks still waiting in it.
func (cl *Closer) closeExt(reason error) error {
	if reason != nil {
		code := codeFailed
		if errors.Is(reason, ErrMissingRanks) {
			code = codeMissing
		}
		cl.ext.stop(code, reason.Error())
	}
	return cl.extClose.Close()
}

var _ io.Closer = (*Closer)(nil)

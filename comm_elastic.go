package collkit

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
	"github.com/collkit/collkit/transport/tcp"
)

// Elastic communicators: Revoke, Shrink, Grow and Join.
//
// A communicator made through a store (Connect, FromEnv, ConnectStore) can
// be replaced by one of the next generation: Shrink over the ranks still
// alive, Grow with the processes waiting in Join. Each generation is
// decided by one round of an agreement through the store, so the store
// must outlive any rank (collbench's launcher hosts it, or etcd; see
// bootstrap.RendezvousWith). Every process keeps an id for its life: its
// rank in generation 0, or, for a process that joined later, one the store
// numbered. Round g (making generation g) keeps its keys under
// collkit/elastic/<g>/:
//
//	alive/<id>   the process takes part in round g; the value lists the
//	             ids it saw die (the suspects), names its node and, over
//	             tcp, gives the address it listens on for generation g
//	joiners      how many processes asked to join in round g (a counter)
//	joiner/<n>   the id of the n-th of them
//	members      the decision: the ids of generation g in rank order
//	ready/<id>   whether the member connected generation g
//	verdict      whether generation g connected, for all (see establish)
//	c/...        the keys the new transport connects through
//
// The agreement. Each member of generation g-1 that enters round g
// publishes alive/<id> with its suspects, then waits until every
// candidate (the members of generation g-1, plus for Grow the joiners it
// counted) has published alive or is suspected by a process that did, or
// until ElasticWait passes. It then proposes the candidates it heard from,
// in the old rank order followed by the joiners, with the store's Create:
// the first proposal wins and every process reads the same winner. So:
//   - Agreement: every process that leaves round g with a communicator has
//     the same members, whatever died meanwhile, since there is one
//     members key per round and it is written once.
//   - Validity: only processes that published alive in round g are
//     members, and a process that did is left out only when a proposer
//     decided before hearing from it (it was suspected, or slower than
//     ElasticWait).
//   - No second world: a process left out (falsely suspected: stopped or
//     slow rather than dead) reads the decision and gets ErrExcluded; it
//     cannot start another generation g, and the next round's candidates are
//     the members of g, so it is out of every later one too.
//   - Termination: a round ends within ElasticWait plus the store's round
//     trips once a proposal is made, as long as the store is reachable.
//
// A member that dies after the decision, before the new transport is
// connected, makes the connection fail (within ElasticWait on every other
// member); they then run round g+1 over the members of g, where the dead
// one is no longer heard from. A member whose connection succeeded meets
// the others in round g+1 when its first collective fails.
//
// The new transport is connected afresh under the round's keys (c/), as
// ConnectStore connects: tcp, shm, rdma, the hierarchical layouts and the
// hybrid's node communicators (IntraNode "nccl"). Every store round trip
// of a shrink is time the survivors wait (over etcd each write is a
// consensus round), so the members connect generation g with what their
// alive notes of round g say rather than with exchanges of their own: the
// node names group the ranks (and tell shm where each rank runs), and over
// tcp each process listens before it publishes alive, so that the
// transport dials the addresses in the notes. Every member reads the same
// notes from the store, so all take the same path; a note that lacks a
// name or an address makes all exchange them under c/ instead. Shared
// memory inside nodes (Options.IntraNode) is connected for a later
// generation only when its algorithm can use it. Each wait for several
// keys (the candidates' alive keys, the members' ready keys and the
// verdict) is one watch (bootstrap.Watch). None of this changes what is
// agreed or by whom: the notes are read after the decision, from members
// only.
//
// Over --transport nccl the first try of a generation makes the NCCL
// communicator from the previous one when every member can: ncclCommShrink
// after Shrink (NCCL 2.27 and newer; NCCL_SHRINK_ABORT when a member's
// communicator had a failed call, but none with an asynchronous error such
// as a reported death, which NCCL refuses to shrink), ncclCommGrow after
// Grow (NCCL 2.29 and newer; joiners join with the new rank 0's grow id).
// Otherwise each member aborts its failed NCCL communicator and makes a new
// one (ncclCommInitRank) through the store. The new rank 0 decides which
// for all; see comm_elastic_nccl.go. Neither NCCL path has run on a GPU
// yet: they are tested against the fake NCCL of transport/nccl's tests
// (the GPU run is a separate issue).

// DefaultElasticWait is Options.ElasticWait when zero.
const DefaultElasticWait = 10 * time.Second

var (
	// ErrRevoked is wrapped by every call on a revoked communicator, on
	// every rank (see Comm.Revoke and RevokedError).
	ErrRevoked = errors.New("communicator revoked")
	// ErrExcluded is returned by Shrink, Grow and Join to a process the
	// other members decided to go on without.
	ErrExcluded = errors.New("left out of the next generation")
	// ErrNotElastic is returned by Shrink and Grow on a communicator that
	// was not made through a store (New, Split).
	ErrNotElastic = errors.New("communicator has no store to agree through")
)

// RevokedError is the error of a communicator that a rank revoked.
type RevokedError struct {
	Rank   int    // the rank that called Revoke
	Reason string // what it said
}

// revokeMark begins the abort notice of a revoked communicator, so that
// ranks that learn of it from a peer wrap ErrRevoked too.
const revokeMark = "communicator revoked by rank "

func (e *RevokedError) Error() string { return revokeMark + strconv.Itoa(e.Rank) + ": " + e.Reason }

// Is makes errors.Is(err, ErrRevoked) true.
func (e *RevokedError) Is(target error) bool { return target == ErrRevoked }

// revokedBy parses the abort notice of a revoked communicator.
func revokedBy(reason string) (*RevokedError, bool) {
	rest, ok := strings.CutPrefix(reason, revokeMark)
	if !ok {
		return nil, false
	}
	num, why, ok := strings.Cut(rest, ": ")
	r, err := strconv.Atoi(num)
	if !ok || err != nil {
		return nil, false
	}
	return &RevokedError{Rank: r, Reason: why}, true
}

// revocation is the error a peer's abort notice carries when it revoked the
// communicator, or nil.
func revocation(err error) *RevokedError {
	var rv *RevokedError
	if errors.As(err, &rv) {
		return rv
	}
	var ae *transport.AbortError
	if errors.As(err, &ae) {
		rv, _ = revokedBy(ae.Reason)
	}
	return rv
}

// Revoke ends the communicator on every rank, as MPI_Comm_revoke does: the
// collective running on this rank, if any, and every later call fail with
// an error wrapping ErrRevoked and reason; the other ranks get the same
// error in the collective they are in, or their next one, as soon as the
// notice reaches them, rather than at their timeout. It does not wait for
// the other ranks. Safe to call from any goroutine, also while a
// collective runs, and more than once (the first reason stays).
func (c *Comm) Revoke(reason string) {
	rv := error(&RevokedError{Rank: c.rank, Reason: reason})
	if !c.revoked.CompareAndSwap(nil, &rv) {
		return
	}
	c.obs.log.Info("revoke", "reason", reason)
	if cancel := c.eng.cancel.Load(); cancel != nil {
		(*cancel)(rv) // a call in progress fails, and aborts the transport
	}
	if c.mu.TryLock() { // idle: abort now
		if c.err == nil {
			c.fail(rv)
		}
		c.mu.Unlock()
	}
}

// elastic is what a communicator needs to make the next generation.
type elastic struct {
	store bootstrap.Store
	env   bootstrap.Env // as Connect got it; Rank and Size are generation 0's
	opts  Options
	gen   int   // the round that made this communicator; 0 for the first
	ids   []int // the process id of each rank
}

// elasticKey is a key of round gen (see the comment at the top).
func elasticKey(gen int, key string) string {
	return "collkit/elastic/" + strconv.Itoa(gen) + "/" + key
}

// latestKey holds the last generation decided, for Join to start from.
const latestKey = "collkit/elastic/latest"

// joinerIDs numbers processes that join after generation 0, from here
// (ranks of generation 0 keep their rank as id).
const joinerIDs = 1 << 20

// Generation is the number of the round that made this communicator: 0
// for one made by Connect, FromEnv or ConnectStore, then one more for each
// Shrink or Grow.
func (c *Comm) Generation() int {
	if c.el == nil {
		return 0
	}
	return c.el.gen
}

// Members lists the process id of every rank, by rank: a process keeps its
// id across generations (its rank in generation 0, or the number Join gave
// it), so a program can tell who left and who came, and keep data that
// belongs to a process (a shard, a seed) with it.
func (c *Comm) Members() []int {
	if c.el == nil {
		ids := make([]int, c.size)
		for r := range ids {
			ids[r] = r
		}
		return ids
	}
	return slices.Clone(c.el.ids)
}

// ID is this process's id (see Members).
func (c *Comm) ID() int {
	if c.el == nil {
		return c.rank
	}
	return c.el.ids[c.rank]
}

// Shrink returns a communicator over the ranks that are still alive, as
// MPI_Comm_shrink and ncclCommShrink do: every surviving rank calls it
// after a failure (or after Revoke), and gets a communicator of the next
// generation over exactly the ranks that called it, numbered in their old
// order. It revokes this communicator first, so that ranks still blocked
// in a collective fail and come to Shrink too. The ranks agree on the
// members through the store, even when another rank dies meanwhile (see
// the agreement above); a rank that is alive but was decided out (it was
// stopped or too slow, more than Options.ElasticWait) gets an error
// wrapping ErrExcluded and must exit or Join again.
//
// On success this communicator is closed and its store passes to the new
// one; on error it is left as it was. The new transport is connected
// afresh through the store (a failed collective leaves partial messages on
// the old connections), except over NCCL, which shrinks its communicator
// with ncclCommShrink where every survivor's NCCL has it (see the comment
// at the top). ctx bounds the whole shrink.
func (c *Comm) Shrink(ctx context.Context) (*Comm, error) {
	return c.next(ctx, "shrink", false)
}

// Grow returns a communicator that also includes the processes waiting in
// Join, as ncclCommGrow does: every member calls it at the same point
// (JoinersWaiting tells them, all alike, whether any process waits). The
// joiners become the last ranks, in the order they came. Members that do
// not call it within Options.ElasticWait are left out, as in Shrink. Over
// NCCL the communicator grows with ncclCommGrow where every member's NCCL
// has it and none was left out (see the comment at the top).
func (c *Comm) Grow(ctx context.Context) (*Comm, error) {
	return c.next(ctx, "grow", true)
}

// JoinersWaiting returns how many processes wait in Join to enter the next
// generation. It is a collective: every rank gets the same number (the
// most any rank saw), so all can decide alike to call Grow.
func (c *Comm) JoinersWaiting(ctx context.Context) (int, error) {
	if c.el == nil {
		return 0, fmt.Errorf("collkit: rank %d: JoinersWaiting: %w (make it with Connect, FromEnv or ConnectStore)", c.rank, ErrNotElastic)
	}
	n, err := bootstrap.Add(ctx, c.el.store, elasticKey(c.el.gen+1, "joiners"), 0)
	if err != nil {
		return 0, fmt.Errorf("collkit: rank %d: JoinersWaiting: %w", c.rank, err)
	}
	buf := []int64{n}
	if err := AllReduce(ctx, c, buf, buf, Max); err != nil {
		return 0, err
	}
	return int(buf[0]), nil
}

// next runs rounds until this process is in a connected communicator of a
// later generation, or is left out, or ctx ends.
func (c *Comm) next(ctx context.Context, what string, grow bool) (*Comm, error) {
	if c.el == nil {
		return nil, fmt.Errorf("collkit: rank %d: %s: %w (make it with Connect, FromEnv or ConnectStore; Split's communicators cannot shrink on their own)",
			c.rank, what, ErrNotElastic)
	}
	start := time.Now()
	if !grow {
		c.Revoke(what + " called by rank " + strconv.Itoa(c.rank))
	}
	c.mu.Lock()
	suspects := c.suspects()
	c.mu.Unlock()
	el := *c.el
	self := el.ids[c.rank]
	members, r, err := agree(ctx, el, self, suspects, grow)
	var nc *Comm
	if err == nil {
		nc, err = establish(ctx, elastic{store: el.store, env: el.env, opts: el.opts, gen: el.gen + 1, ids: members}, self, r, c)
	}
	if err != nil {
		return nil, fmt.Errorf("collkit: rank %d (%s): %s from generation %d: %w", c.rank, procName(self), what, el.gen, err)
	}
	c.handOver(nc)
	nc.obs.log.Info(what, "generation", nc.el.gen, "size", nc.size, "took", time.Since(start))
	return nc, nil
}

// establish connects generation el.gen, whose members were decided, all or
// nothing: every member says whether it connected, and one verdict for all
// is made with the store's Create (ok only when every member said so). When
// it fails (a member died, or connected too late), the members run the
// next round over the same candidates, suspecting those that did not say,
// and try again. r is what this process brings from the round that chose
// the members; from is the communicator of the previous generation on a
// member of it (nil on a joiner), whose NCCL communicator the first try
// may make the new one from (comm_elastic_nccl.go).
func establish(ctx context.Context, el elastic, self int, r round, from *Comm) (*Comm, error) {
	for first := true; ; first = false {
		nc, err := el.connect(ctx, self, r, from, first)
		v, serr := el.settle(ctx, self, err == nil)
		if serr == nil && v.OK {
			return nc, nil
		}
		missing := v.Missing
		if nc != nil {
			nc.Close()
		}
		if serr != nil {
			return nil, serr
		}
		if ctx.Err() != nil || len(missing) == 0 && !(first && el.opts.Transport == "nccl") {
			// Every member said, so none died: the failure is not one a
			// next round mends (Options the new size refuses, say), unless
			// it was NCCL's shrink or grow, which the next round does not
			// try (comm_elastic_nccl.go).
			return nil, fmt.Errorf("connecting generation %d (%d ranks): %w", el.gen, len(el.ids), cmp.Or(err, errors.Join(ctx.Err(),
				errors.New("another member failed to connect"))))
		}
		el.log().Info("elastic: generation failed to connect; next round", "generation", el.gen, "missing", missing, "err", err)
		members, next, err := agree(ctx, el, self, missing, false)
		if err != nil {
			return nil, err
		}
		r = next
		el = elastic{store: el.store, env: el.env, opts: el.opts, gen: el.gen + 1, ids: members}
	}
}

// verdict is the decision whether a generation connected: OK, or the
// members that did not say within the wait (suspected dead in the next
// round).
type verdict struct {
	OK      bool  `json:"ok"`
	Missing []int `json:"missing,omitempty"`
}

// settle publishes whether this process connected generation el.gen and
// returns the verdict for all members. It waits until every member has
// said (then it proposes the verdict: OK when all connected), or another
// member's verdict is in the store (it takes that one, so that all go on
// with the same suspects), or twice ElasticWait has passed (it proposes a
// failure, with the members still silent as the suspects). The wait is
// twice the connect's, so a member whose connection failed at once waits
// for those that waited out the connect.
func (el elastic) settle(ctx context.Context, self int, connected bool) (verdict, error) {
	mine := "failed"
	if connected {
		mine = "ok"
	}
	if err := el.store.Set(ctx, elasticKey(el.gen, "ready/"+strconv.Itoa(self)), []byte(mine)); err != nil {
		return verdict{}, fmt.Errorf("publishing whether it connected: %w", storeHint(err))
	}
	wctx, cancel := context.WithTimeout(ctx, 2*el.opts.elasticWait())
	defer cancel()
	// One watch (etcd watches the round's prefix once) on the others'
	// ready keys, then the verdict key, the last of keys.
	var others []int
	var keys []string
	for _, id := range el.ids {
		if id != self {
			others = append(others, id)
			keys = append(keys, elasticKey(el.gen, "ready/"+strconv.Itoa(id)))
		}
	}
	keys = append(keys, elasticKey(el.gen, "verdict"))
	all, silent := connected, map[int]bool{}
	for _, id := range others {
		silent[id] = true
	}
	var won []byte
	if len(others) == 0 {
		keys = nil // alone: it proposes
	}
	bootstrap.Watch(wctx, el.store, keys, func(i int, b []byte) bool {
		if i == len(others) {
			won = b
			return false
		}
		delete(silent, others[i])
		all = all && string(b) == "ok"
		// Once every member said and all connected, the first proposes
		// and the others take its verdict (every proposal is a write, a
		// consensus round in etcd), unless it does not come within the
		// wait.
		return len(silent) > 0 || all && self != el.ids[0]
	})
	if won == nil {
		v := verdict{OK: all && len(silent) == 0}
		for _, id := range el.ids {
			if silent[id] {
				v.Missing = append(v.Missing, id)
			}
		}
		proposal, _ := json.Marshal(v)
		var err error
		if won, err = bootstrap.Create(ctx, el.store, elasticKey(el.gen, "verdict"), proposal); err != nil {
			return verdict{}, fmt.Errorf("deciding whether generation %d connected: %w", el.gen, storeHint(err))
		}
	}
	var v verdict
	if err := json.Unmarshal(won, &v); err != nil {
		return verdict{}, fmt.Errorf("the store holds a verdict on generation %d that is not one: %q", el.gen, won)
	}
	return v, nil
}

// suspects are the process ids of the ranks this communicator's failure
// found dead or not answering. The caller holds c.mu.
func (c *Comm) suspects() []int {
	var fe *FailureError
	if !errors.As(c.err, &fe) {
		return nil
	}
	var ids []int
	for _, r := range fe.Dead {
		ids = append(ids, c.el.ids[r])
	}
	for _, s := range fe.Stuck {
		if !s.Answered {
			ids = append(ids, c.el.ids[s.Rank])
		}
	}
	return ids
}

// aliveNote is what a process publishes when it enters a round. Node and
// Addr are what the members would otherwise exchange through the store,
// one round trip each, to connect the generation.
type aliveNote struct {
	Suspects []int `json:"suspects,omitempty"`
	// Node is the name of its node (nodeName), which groups the ranks
	// for the hierarchical algorithm and says where shm ranks run.
	Node string `json:"node,omitempty"`
	// Addr is where it listens for the generation's tcp transport
	// (round.ln); empty for other transports.
	Addr string `json:"addr,omitempty"`
}

// round is what a process brings from a round to the connection of the
// generation it made: the alive notes it read, by process id (its own
// too), and the listener its own note announced, or nil. Connecting the
// generation takes the listener or closes it; so does close.
type round struct {
	notes map[int]aliveNote
	ln    net.Listener
}

func (r round) close() {
	if r.ln != nil {
		r.ln.Close()
	}
}

// enter makes the alive note of a process that enters a round with
// suspects, and the round it starts. Over tcp it listens for the next
// generation at once, so that its note can give the address; when it
// cannot, the note gives none and the members exchange addresses through
// the store.
func enter(env bootstrap.Env, opts Options, self int, suspects []int) ([]byte, round) {
	note := aliveNote{Suspects: suspects, Node: nodeName()}
	var ln net.Listener
	if opts.Transport == "" || opts.Transport == "tcp" {
		var err error
		if ln, err = tcp.Listen(tcpAddrFor(env), opts.TCPCongestion); err == nil {
			note.Addr = ln.Addr().String()
		}
	}
	b, _ := json.Marshal(note)
	return b, round{notes: map[int]aliveNote{self: note}, ln: ln}
}

// agree runs round el.gen+1 for process self and returns its members, and
// the round for connecting them.
func agree(ctx context.Context, el elastic, self int, suspects []int, grow bool) (members []int, r round, err error) {
	gen := el.gen + 1
	note, r := enter(el.env, el.opts, self, suspects)
	defer func() {
		if err != nil {
			r.close()
		}
	}()
	if err := el.store.Set(ctx, elasticKey(gen, "alive/"+strconv.Itoa(self)), note); err != nil {
		return nil, r, fmt.Errorf("publishing that it is alive: %w", storeHint(err))
	}
	candidates := slices.Clone(el.ids)
	if grow {
		joiners, err := joinersOf(ctx, el.store, gen, el.opts.elasticWait())
		if err != nil {
			return nil, r, err
		}
		candidates = append(candidates, joiners...)
	}
	heard := hear(ctx, el.store, gen, self, candidates, suspects, el.opts.elasticWait(), r.notes)
	proposal, _ := json.Marshal(heard)
	won, err := bootstrap.Create(ctx, el.store, elasticKey(gen, "members"), proposal)
	if err != nil {
		return nil, r, fmt.Errorf("proposing the members: %w", storeHint(err))
	}
	if err := json.Unmarshal(won, &members); err != nil {
		return nil, r, fmt.Errorf("the store holds a decision that is not a list of ids: %q", won)
	}
	if len(members) > 0 && members[0] == self { // one write per round: each costs a consensus round in etcd
		el.store.Set(ctx, latestKey, []byte(strconv.Itoa(gen))) // a hint for Join; the decision is the members key
	}
	if !slices.Contains(members, self) {
		return nil, r, fmt.Errorf("%w: the others decided generation %d without it (members %s): it was suspected dead, or did not come within Options.ElasticWait (%v); exit, or Join the job again",
			ErrExcluded, gen, procNames(members), el.opts.elasticWait())
	}
	return members, r, nil
}

// hear waits until every candidate has published alive in round gen or is
// suspected by one that did, or wait passes, and returns those heard from,
// in the order of candidates; it adds their notes to notes.
func hear(ctx context.Context, store bootstrap.Store, gen, self int, candidates, suspects []int, wait time.Duration, notes map[int]aliveNote) []int {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	heard := map[int]bool{self: true}
	suspected := map[int]bool{}
	suspect := func(ids []int) {
		for _, id := range ids {
			suspected[id] = !heard[id]
		}
	}
	var others []int
	var keys []string
	for _, id := range candidates {
		if id != self {
			others = append(others, id)
			keys = append(keys, elasticKey(gen, "alive/"+strconv.Itoa(id)))
		}
	}
	waiting := func() bool {
		return slices.ContainsFunc(others, func(id int) bool { return !heard[id] && !suspected[id] })
	}
	suspect(suspects)
	if waiting() {
		// One watch for all (etcd watches the common prefix once); an
		// error (the wait passed) leaves those not heard from out.
		bootstrap.Watch(ctx, store, keys, func(i int, b []byte) bool {
			var note aliveNote
			json.Unmarshal(b, &note)
			heard[others[i]], notes[others[i]] = true, note
			suspect(note.Suspects)
			return waiting()
		})
	}
	return slices.DeleteFunc(slices.Clone(candidates), func(id int) bool { return !heard[id] })
}

// joinersOf returns the ids of the processes that asked to join in round
// gen so far.
func joinersOf(ctx context.Context, store bootstrap.Store, gen int, wait time.Duration) ([]int, error) {
	n, err := bootstrap.Add(ctx, store, elasticKey(gen, "joiners"), 0)
	if err != nil {
		return nil, fmt.Errorf("counting the processes that wait to join: %w", storeHint(err))
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var ids []int
	for i := range n {
		b, err := store.Get(ctx, elasticKey(gen, "joiner/"+strconv.FormatInt(i, 10)))
		if err != nil {
			continue // it counted itself and died before it said who it is
		}
		if id, err := strconv.Atoi(string(b)); err == nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// connect makes the communicator of generation el.gen for process self,
// through the round's keys, within Options.ElasticWait. Where every
// member's alive note gives them, the node names and (tcp) the addresses
// come from the notes rather than from exchanges through the store; it
// takes r's listener or closes it. Over NCCL the first try (first) may
// make it from the NCCL communicator of from, the previous generation's
// communicator on this process (nil on a joiner).
func (el elastic) connect(ctx context.Context, self int, r round, from *Comm, first bool) (*Comm, error) {
	taken := false
	defer func() {
		if !taken {
			r.close()
		}
	}()
	env := el.env
	env.Rank, env.Size, env.LocalSize = slices.Index(el.ids, self), len(el.ids), 0
	opts := el.opts
	opts.Nodes = nil // ranks moved: find the nodes by host name again
	opts.SimulatedNodes = min(opts.SimulatedNodes, env.Size)
	if opts.IntraNode == "" && !usesIntra(opts.Algorithm) {
		// Shared memory inside the node serves only the hierarchical
		// algorithm (and perhaps a registered one): connecting it would
		// cost the shrink three more rounds through the store.
		opts.IntraNode = "group"
	}
	ctx, cancel := context.WithTimeout(ctx, opts.elasticWait())
	defer cancel()
	store := bootstrap.WithPrefix(el.store, elasticKey(el.gen, "c/"))
	var made transport.Transport // NCCL's shrink or grow made it
	if opts.Transport == "nccl" {
		var err error
		if made, err = el.fromNCCL(ctx, store, env, opts, self, from, first); err != nil {
			return nil, err
		}
	}
	notes, err := el.memberNotes(ctx, r.notes)
	if err != nil {
		if made != nil {
			made.Close()
		}
		return nil, err
	}
	// Every member reads the same notes, so all take the same path.
	names, addrs := make([][]byte, len(notes)), make([]string, len(notes))
	for i, n := range notes {
		names[i], addrs[i] = []byte(n.Node), n.Addr
	}
	known := !slices.ContainsFunc(notes, func(n aliveNote) bool { return n.Node == "" })
	if known && opts.SimulatedNodes == 0 {
		opts.Nodes = groupNames(names)
	}
	conn := connectTransport
	switch {
	case made != nil:
		conn = func(context.Context, bootstrap.Env, bootstrap.Store, Options) (transport.Transport, error) {
			t := made
			made = nil
			return t, nil
		}
	case r.ln != nil && !slices.Contains(addrs, ""):
		conn = func(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options) (transport.Transport, error) {
			taken = true
			return connectTCPOn(ctx, env, store, opts, r.ln, addrs)
		}
	case known && opts.Transport == "shm":
		conn = connectShmKnown(names)
	}
	nc, err := connectStore(ctx, env, store, opts, conn)
	if made != nil {
		made.Close() // connectStore failed before it took it
	}
	if err != nil {
		return nil, err
	}
	nc.el = &el
	return nc, nil
}

// memberNotes returns the alive note of every member of generation el.gen
// in round el.gen, by rank: from notes, or else from the store, where
// every member's note is (a proposer heard from each).
func (el elastic) memberNotes(ctx context.Context, notes map[int]aliveNote) ([]aliveNote, error) {
	out := make([]aliveNote, len(el.ids))
	var keys []string
	var at []int
	for r, id := range el.ids {
		if note, ok := notes[id]; ok {
			out[r] = note
		} else {
			keys, at = append(keys, elasticKey(el.gen, "alive/"+strconv.Itoa(id))), append(at, r)
		}
	}
	vals, err := bootstrap.GetMany(ctx, el.store, keys)
	if err != nil {
		return nil, fmt.Errorf("reading the members' alive notes: %w", storeHint(err))
	}
	for i, v := range vals {
		json.Unmarshal(v, &out[at[i]]) // a note that says nothing: the members exchange what it lacks
	}
	return out, nil
}

// usesIntra reports whether the named algorithm may run on the intra-node
// transport (AlgorithmSetup.Intra): hierarchical does, the other built-ins
// do not, and one registered by a program may.
func usesIntra(algorithm string) bool {
	return algorithm == "hierarchical" || algorithm != "" && !slices.Contains(builtinAlgorithms, algorithm)
}

// handOver closes c, which nc replaces, giving nc the store c kept open.
func (c *Comm) handOver(nc *Comm) {
	kept := c.closers[:0]
	for _, cl := range c.closers {
		switch s := cl.(type) {
		case storeCloser:
			nc.closers = append(nc.closers, storeCloser{s.cl, nc})
		case joinedStore:
			nc.closers = append(nc.closers, s)
		default:
			kept = append(kept, cl)
		}
	}
	c.closers = kept
	c.Close()
}

// joinedStore is the store a communicator made by Join keeps open; it
// passes to the next generations.
type joinedStore struct{ io.Closer }

// Join enters a running elastic job as a new process (a replacement for a
// dead rank, or an extra worker), as torchelastic's rendezvous admits one:
// it reaches the job's store (bootstrap.OpenStore: COLLKIT_STORE, or the
// TCP store at env's address; it must outlive the ranks: collbench's
// launcher or etcd hosts it), asks to join the next
// generation and waits until the members call Grow (or Shrink, which
// admits no one: it then waits for the generation after). It returns the
// communicator of the generation it joined, in which it is one of the last
// ranks. env.Rank and env.Size are not used. ctx bounds the wait.
func Join(ctx context.Context, env bootstrap.Env, opts Options) (*Comm, error) {
	store, closer, err := bootstrap.OpenStore(ctx, env)
	if err != nil {
		return nil, fmt.Errorf("collkit: join: reaching the job's store: %w", err)
	}
	c, err := JoinStore(ctx, env, store, opts)
	if err != nil {
		closer.Close()
		return nil, err
	}
	c.closers = append(c.closers, joinedStore{closer})
	return c, nil
}

// JoinStore is Join through a store the caller already reached, and keeps
// open until the communicator is closed.
func JoinStore(ctx context.Context, env bootstrap.Env, store bootstrap.Store, opts Options) (*Comm, error) {
	if _, err := findAlgorithm(opts.Algorithm); err != nil {
		return nil, fmt.Errorf("collkit: join: %w", err)
	}
	if opts.Transport == AutoTransport {
		return nil, fmt.Errorf("collkit: join: %w: Transport %q: a joiner runs the members' transport; name it (tcp, or shm when every process is on this host)",
			ErrBadArgument, AutoTransport)
	}
	n, err := bootstrap.Add(ctx, store, "collkit/elastic/ids", 1)
	if err != nil {
		return nil, fmt.Errorf("collkit: join: taking a process id: %w", storeHint(err))
	}
	self := joinerIDs + int(n) - 1
	gen, err := bootstrap.Add(ctx, store, latestKey, 0)
	for err == nil {
		gen++
		note, r := enter(env, opts, self, nil)
		var members []int
		if members, err = joinRound(ctx, store, int(gen), self, note); err == nil && slices.Contains(members, self) {
			c, err := establish(ctx, elastic{store: store, env: env, opts: opts, gen: int(gen), ids: members}, self, r, nil)
			if err != nil {
				return nil, fmt.Errorf("collkit: join (%s): generation %d: %w", procName(self), gen, err)
			}
			return c, nil
		}
		r.close()
	}
	return nil, fmt.Errorf("collkit: join (%s): waiting for the members to call Grow: %w", procName(self), storeHint(err))
}

// joinRound asks to join in round gen with its alive note and returns the
// members decided.
func joinRound(ctx context.Context, store bootstrap.Store, gen, self int, note []byte) ([]int, error) {
	slot, err := bootstrap.Add(ctx, store, elasticKey(gen, "joiners"), 1)
	if err == nil {
		err = store.Set(ctx, elasticKey(gen, "joiner/"+strconv.FormatInt(slot-1, 10)), []byte(strconv.Itoa(self)))
	}
	if err == nil {
		err = store.Set(ctx, elasticKey(gen, "alive/"+strconv.Itoa(self)), note)
	}
	var won []byte
	if err == nil {
		won, err = store.Get(ctx, elasticKey(gen, "members"))
	}
	if err != nil {
		return nil, err
	}
	var members []int
	if err := json.Unmarshal(won, &members); err != nil {
		return nil, fmt.Errorf("the store holds a decision that is not a list of ids: %q", won)
	}
	return members, nil
}

// procName names a process by its id.
func procName(id int) string {
	if id >= joinerIDs {
		return "joiner " + strconv.Itoa(id-joinerIDs)
	}
	return "process " + strconv.Itoa(id)
}

func procNames(ids []int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = procName(id)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// storeHint adds, to an error of the store, where an elastic job's store
// must live.
func storeHint(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || errors.Is(err, bootstrap.ErrUnsupported) {
		return err
	}
	return fmt.Errorf("%w (an elastic job needs a store that outlives every rank: collbench's launcher hosts one, or use etcd; a store hosted by rank 0 dies with it)", err)
}

func (opts Options) elasticWait() time.Duration {
	if opts.ElasticWait > 0 {
		return opts.ElasticWait
	}
	return DefaultElasticWait
}

// log is the communicator's logger, or a silent one.
func (el elastic) log() *slog.Logger {
	if el.opts.Logger != nil {
		return el.opts.Logger
	}
	return slog.New(slog.DiscardHandler)
}

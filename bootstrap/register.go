package bootstrap

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Every rank registers with the store before it reads or writes a key
// (Rendezvous does it): it says who it is (Identity), and the store checks
// it against the ranks that came before.
//
//   - Another job id: the process is turned away (ErrJobMismatch) and the
//     store's own ranks carry on, since it may be a stranger that found the
//     port; the store remembers it, so that the ranks' progress lines and
//     their timeout error name it if its rank never comes.
//   - Another world size, or a rank another process already holds: the store
//     stops the rendezvous (ErrSizeMismatch, ErrDuplicateRank). Every waiting
//     Get and every later request of every rank gets the error, which names
//     both processes, so every rank fails at once instead of timing out, and a
//     job that a stranger joined fails instead of passing.
//
// The store knows who registered, so any rank can ask which ranks are
// missing (Client.Roster). Once every rank has registered, the store sets
// rosterKey, which Rendezvous waits for.

// Errors of the rendezvous.
var (
	// ErrSizeMismatch is wrapped, on every rank still using the store, when
	// two ranks registered different world sizes.
	ErrSizeMismatch = errors.New("bootstrap: ranks disagree on the world size")
	// ErrDuplicateRank is wrapped, on every rank still using the store, when
	// two processes claimed the same rank: two jobs share one MASTER_PORT, or
	// a launcher gave two processes one rank.
	ErrDuplicateRank = errors.New("bootstrap: two processes claimed the same rank")
	// ErrJobMismatch is wrapped by Register on a process whose job id is not
	// the job the store serves; the store turns it away.
	ErrJobMismatch = errors.New("bootstrap: the store belongs to another job")
	// ErrMissingRanks is wrapped by Rendezvous when its context ends before
	// every rank has joined, and on the ranks still waiting when rank 0 gives
	// up for that reason; the error names the missing ranks.
	ErrMissingRanks = errors.New("bootstrap: not every rank joined")
	// ErrSetupFailed is wrapped on the ranks still using the store when the
	// rank hosting it failed its own setup and stopped the store (see
	// Closer.Abort); the error quotes that rank's reason.
	ErrSetupFailed = errors.New("bootstrap: the rank hosting the store failed its setup")
)

// Codes in the key of a frameError that carries one of the errors above.
const (
	codeSize      = "size"
	codeDuplicate = "duplicate"
	codeJob       = "job"
	codeMissing   = "missing"
	codeFailed    = "failed"
)

var codeErrors = map[string]error{
	codeSize:      ErrSizeMismatch,
	codeDuplicate: ErrDuplicateRank,
	codeJob:       ErrJobMismatch,
	codeMissing:   ErrMissingRanks,
	codeFailed:    ErrSetupFailed,
}

// StoreError is an error the store reported: it turned this process away
// (ErrJobMismatch), or it stopped the rendezvous for every rank
// (ErrSizeMismatch, ErrDuplicateRank, ErrMissingRanks, ErrSetupFailed).
// errors.Is matches the sentinel.
type StoreError struct {
	Addr   string // the store's address
	Err    error  // one of the sentinels above
	Detail string // what happened and what to do, as the store put it
}

func (e *StoreError) Error() string {
	what := "stopped the rendezvous of every rank"
	if e.Err == ErrJobMismatch {
		what = "turned this process away"
	}
	return fmt.Sprintf("bootstrap: the store at %s %s: %s", e.Addr, what, e.Detail)
}

func (e *StoreError) Unwrap() error { return e.Err }

// Identity is what a rank tells the store about itself when it registers.
type Identity struct {
	Rank int `json:"rank"`
	Size int `json:"size"`
	// SizeVar is the variable Size came from (WORLD_SIZE, SLURM_NTASKS,
	// ...), for messages; empty when unknown.
	SizeVar  string `json:"size_var,omitempty"`
	JobID    string `json:"job"`
	JobIDVar string `json:"job_var,omitempty"` // see Env.JobIDVar
	Host     string `json:"host"`
	PID      int    `json:"pid"`
	// Nonce is random per process, so that two processes that claim one
	// rank are told apart even when host and pid say nothing (containers).
	Nonce string `json:"nonce"`
}

// NewIdentity describes this process as rank env.Rank of env's job.
func NewIdentity(env Env) Identity {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	b := make([]byte, 8)
	rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return Identity{Rank: env.Rank, Size: env.Size, SizeVar: sizeVar(env.Source), JobID: env.JobID,
		JobIDVar: env.JobIDVar, Host: host, PID: os.Getpid(), Nonce: hex.EncodeToString(b)}
}

// String names the process: "rank 1 (host node7, pid 4242)".
func (id Identity) String() string {
	return fmt.Sprintf("rank %d (host %s, pid %d)", id.Rank, id.Host, id.PID)
}

// sizeClaim is the world size as its launcher put it: "WORLD_SIZE=3".
func (id Identity) sizeClaim() string {
	if id.SizeVar == "" {
		return fmt.Sprintf("world size %d", id.Size)
	}
	return fmt.Sprintf("%s=%d", id.SizeVar, id.Size)
}

// jobClaim is the job id and where it came from: `job "x" (from SLURM_JOB_ID)`.
func (id Identity) jobClaim() string {
	if id.JobIDVar == "" {
		return fmt.Sprintf("job %q", id.JobID)
	}
	return fmt.Sprintf("job %q (from %s)", id.JobID, id.JobIDVar)
}

// Limits on what an Identity off the network may hold.
const (
	maxIdentityString = 255
	maxTurnedAway     = 4    // strangers a Roster lists
	maxMissingListed  = 1024 // missing ranks a Roster lists
)

func (id Identity) validate() error {
	switch {
	case id.Size < 1 || id.Rank < 0 || id.Rank >= id.Size:
		return fmt.Errorf("rank %d of %d is not a place in a job", id.Rank, id.Size)
	case id.PID < 0:
		return fmt.Errorf("pid %d", id.PID)
	case id.Nonce == "":
		return errors.New("no nonce")
	}
	for _, s := range []string{id.SizeVar, id.JobID, id.JobIDVar, id.Host, id.Nonce} {
		if len(s) > maxIdentityString {
			return fmt.Errorf("a field of %d bytes, limit %d", len(s), maxIdentityString)
		}
		if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			return fmt.Errorf("field %q has unprintable characters", s)
		}
	}
	return nil
}

func decodeIdentity(b []byte) (Identity, error) {
	var id Identity
	if err := json.Unmarshal(b, &id); err != nil {
		return Identity{}, fmt.Errorf("%w: identity: %v", errBadFrame, err)
	}
	if err := id.validate(); err != nil {
		return Identity{}, fmt.Errorf("%w: identity: %v", errBadFrame, err)
	}
	return id, nil
}

// Roster is what the store knows of a job's ranks while they join.
type Roster struct {
	JobID  string `json:"job"`
	Size   int    `json:"size"`   // 0 until a rank registers
	Joined int    `json:"joined"` // ranks registered
	// Missing lists the ranks in [0, Size) that have not registered, the
	// first maxMissingListed of them; MissingCount is how many there are.
	Missing      []int `json:"missing"`
	MissingCount int   `json:"missing_count"`
	// TurnedAway lists the last few processes of other jobs that the store
	// refused (ErrJobMismatch).
	TurnedAway []Identity `json:"turned_away,omitempty"`
	// Failed is why the store stopped the rendezvous, if it did.
	Failed string `json:"failed,omitempty"`
}

func decodeRoster(b []byte) (Roster, error) {
	var r Roster
	if err := json.Unmarshal(b, &r); err != nil {
		return Roster{}, fmt.Errorf("%w: roster: %v", errBadFrame, err)
	}
	if r.Size < 0 || r.Joined < 0 || r.MissingCount < len(r.Missing) || len(r.Missing) > maxMissingListed ||
		len(r.TurnedAway) > maxTurnedAway {
		return Roster{}, fmt.Errorf("%w: roster of size %d with %d joined, %d of %d missing listed, %d turned away",
			errBadFrame, r.Size, r.Joined, len(r.Missing), r.MissingCount, len(r.TurnedAway))
	}
	for _, m := range r.Missing {
		if m < 0 || m >= r.Size {
			return Roster{}, fmt.Errorf("%w: roster lists rank %d missing from %d", errBadFrame, m, r.Size)
		}
	}
	return r, nil
}

// missingText names the missing ranks: "ranks 1, 3-7 of 8".
func (r Roster) missingText() string {
	if r.MissingCount == 0 {
		return "no ranks"
	}
	s := "rank"
	if r.MissingCount > 1 {
		s += "s"
	}
	s += " " + rankList(r.Missing)
	if r.MissingCount > len(r.Missing) {
		s += fmt.Sprintf(" and %d more", r.MissingCount-len(r.Missing))
	}
	return fmt.Sprintf("%s of %d", s, r.Size)
}

// turnedAwayText says which strangers the store refused, or "".
func (r Roster) turnedAwayText() string {
	if len(r.TurnedAway) == 0 {
		return ""
	}
	parts := make([]string, len(r.TurnedAway))
	for i, id := range r.TurnedAway {
		parts[i] = fmt.Sprintf("%s of %s", id, id.jobClaim())
	}
	return fmt.Sprintf("; the store turned away %s, because this job is %q: if that is one of this job's ranks, give every rank the same job id (COLLKIT_JOB_ID)",
		strings.Join(parts, ", "), r.JobID)
}

// rankList writes ranks compactly, runs as ranges: "0, 2-5, 9".
func rankList(ranks []int) string {
	rs := slices.Sorted(slices.Values(ranks))
	var b strings.Builder
	for i := 0; i < len(rs); {
		j := i
		for j+1 < len(rs) && rs[j+1] == rs[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(rs[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(rs[j]))
		}
		i = j + 1
	}
	return b.String()
}

// rosterKey is set by the store once every rank has registered. Clients
// cannot set keys under reservedPrefix.
const (
	reservedPrefix = "collkit/rendezvous/"
	rosterKey      = reservedPrefix + "complete"
)

// meeting says where a job's ranks meet, for the errors of a rendezvous:
// the TCP store at MASTER_ADDR:MASTER_PORT or an external store
// (COLLKIT_STORE).
type meeting struct {
	shared string // what two jobs share when they meet: "one MASTER_ADDR:MASTER_PORT"
	own    string // what each job needs its own of: "its own MASTER_PORT"
}

var serverMeeting = meeting{shared: "one MASTER_ADDR:MASTER_PORT", own: "its own MASTER_PORT"}

// jobText is the error of a process of another job than job (quoted,
// followed by anything that names who holds it).
func (m meeting) jobText(job string, id Identity) string {
	return fmt.Sprintf("this store serves job %s and %s belongs to %s: two jobs share %s, "+
		"or this job's ranks were given different job ids; give each job %s, "+
		"or every rank of one job the same COLLKIT_JOB_ID", job, id, id.jobClaim(), m.shared, m.own)
}

// sizeText is the error of a rank whose world size is not first's.
func sizeText(id, first Identity) string {
	return fmt.Sprintf("%s says %s but %s says %s: every rank must be started with the same world size",
		id, id.sizeClaim(), first, first.sizeClaim())
}

// duplicateText is the error of second claiming first's rank, after.
func (m meeting) duplicateText(first, second Identity, after time.Duration) string {
	return fmt.Sprintf("rank %d was claimed twice, by host %s (pid %d) and, %v later, by host %s (pid %d): "+
		"two jobs share %s, or two processes were given the same rank; "+
		"give each job %s, or tell jobs apart with a job id (COLLKIT_JOB_ID, or the launcher's) and COLLKIT_SECRET",
		second.Rank, first.Host, first.PID, after.Round(time.Millisecond), second.Host, second.PID, m.shared, m.own)
}

// member is a registered rank.
type member struct {
	id   Identity
	c    *serverConn
	at   time.Time
	left bool // its connection closed after the roster was complete
}

// register checks the identity a client sends and answers it.
func (s *Server) register(c *serverConn, reqID uint64, value []byte) {
	id, err := decodeIdentity(value)
	if err != nil {
		c.send(frame{typ: frameError, id: reqID, value: []byte(err.Error())})
		return
	}
	s.mu.Lock()
	reply, wake, with := s.registerLocked(c, id)
	s.mu.Unlock()
	reply.id = reqID
	c.send(reply)
	for _, w := range wake {
		with.id = w.id
		w.c.send(with)
	}
}

// registerLocked records id for c and returns the reply, and the waiters to
// wake and the frame to wake them with: the roster key's value when the
// roster is now complete, the error when the registration stopped the
// rendezvous. The caller holds s.mu.
func (s *Server) registerLocked(c *serverConn, id Identity) (reply frame, wake []waiter, with frame) {
	if f := s.refusal(c); f != nil {
		return *f, nil, frame{}
	}
	if c.member != nil && c.member.Rank != id.Rank {
		return frame{typ: frameError, value: fmt.Appendf(nil,
			"this connection already registered rank %d; a process registers once", c.member.Rank)}, nil, frame{}
	}
	if s.jobID == "" {
		s.jobID = id.JobID
	}
	if id.JobID != s.jobID {
		owner := ""
		if m, ok := s.members[0]; ok {
			owner = fmt.Sprintf(" (its %s)", m.id)
		}
		c.refused = &frame{typ: frameError, key: codeJob, value: []byte(serverMeeting.jobText(strconv.Quote(s.jobID)+owner, id))}
		s.turnedAway = append(s.turnedAway, id)
		if len(s.turnedAway) > maxTurnedAway {
			s.turnedAway = s.turnedAway[1:]
		}
		s.log.Warn("bootstrap: store turned away a process of another job", "store", s.Addr(),
			"job", s.jobID, "its_job", id.JobID, "claimed_rank", id.Rank, "host", id.Host, "pid", id.PID)
		return *c.refused, nil, frame{}
	}
	if s.size == 0 {
		s.size, s.sizeBy = id.Size, id
	}
	if id.Size != s.size {
		return s.failLocked(codeSize, sizeText(id, s.sizeBy))
	}
	if m, ok := s.members[id.Rank]; ok {
		if m.id.Nonce == id.Nonce {
			return frame{typ: frameOK}, nil, frame{} // the same process again
		}
		msg := serverMeeting.duplicateText(m.id, id, time.Since(m.at))
		if m.left {
			// The rank's process finished its part and left: the job's
			// results no longer depend on who claims it now.
			c.refused = &frame{typ: frameError, key: codeDuplicate, value: []byte(msg)}
			return *c.refused, nil, frame{}
		}
		return s.failLocked(codeDuplicate, msg)
	}
	s.members[id.Rank] = member{id: id, c: c, at: time.Now()}
	c.member = &id
	if len(s.members) == s.size && !s.complete {
		s.complete = true
		v := []byte(strconv.Itoa(s.size))
		s.values[rosterKey] = v
		wake = s.waiters[rosterKey]
		delete(s.waiters, rosterKey)
		for _, w := range wake {
			delete(w.c.gets, w.id)
		}
		return frame{typ: frameOK}, wake, frame{typ: frameValue, value: v}
	}
	return frame{typ: frameOK}, nil, frame{}
}

// refusal is the error every request of c gets, or nil: c was turned away,
// or the rendezvous was stopped. The caller holds s.mu.
func (s *Server) refusal(c *serverConn) *frame {
	if c.refused != nil {
		return c.refused
	}
	if s.failure != nil {
		return s.failure
	}
	return nil
}

// failLocked stops the rendezvous with the error code and msg, unless it
// was stopped already, and returns that error as a reply, and the waiters
// to answer and the error again to answer them with. The caller holds s.mu.
func (s *Server) failLocked(code, msg string) (frame, []waiter, frame) {
	if s.failure == nil {
		s.failure = &frame{typ: frameError, key: code, value: []byte(msg)}
		// Every rank still in its setup gets the error and reports it;
		// after every rank joined, those past their setup do not hear of
		// it, so the store's host says it.
		if s.complete && code != codeFailed && code != codeMissing {
			s.log.Warn("bootstrap: store stopped the rendezvous after every rank had joined: ranks past their setup "+
				"go on, and one of them may be a process of another job", "store", s.Addr(), "why", msg)
		} else {
			s.log.Debug("bootstrap: store stopped the rendezvous", "store", s.Addr(), "why", msg)
		}
	}
	var wake []waiter
	for key, ws := range s.waiters {
		wake = append(wake, ws...)
		delete(s.waiters, key)
	}
	for _, w := range wake {
		delete(w.c.gets, w.id)
	}
	return *s.failure, wake, *s.failure
}

// abort stops the rendezvous with msg (see Closer.Abort) and answers every
// waiting Get with it.
func (s *Server) abort(code, msg string) {
	s.mu.Lock()
	_, wake, with := s.failLocked(code, msg)
	s.mu.Unlock()
	for _, w := range wake {
		with.id = w.id
		w.c.send(with)
	}
}

// lateConflict is the error that stopped the rendezvous after every rank
// had joined because of a conflict between ranks, or nil.
func (s *Server) lateConflict() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.failure; f != nil && s.complete && (f.key == codeDuplicate || f.key == codeSize) {
		return &StoreError{Addr: s.Addr(), Err: codeErrors[f.key], Detail: string(f.value) +
			" (after every rank had joined: the ranks past their setup went on, and one of them may have been a process of another job)"}
	}
	return nil
}

// roster describes the registrations so far.
func (s *Server) roster() Roster {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := Roster{JobID: s.jobID, Size: s.size, Joined: len(s.members), TurnedAway: slices.Clone(s.turnedAway)}
	for rank := range s.size {
		if _, ok := s.members[rank]; !ok {
			if r.MissingCount++; len(r.Missing) < maxMissingListed {
				r.Missing = append(r.Missing, rank)
			}
		}
	}
	if s.failure != nil {
		r.Failed = string(s.failure.value)
	}
	return r
}

// unregisterLocked forgets the rank c registered, when c goes away before
// the roster is complete: a rank restarted before the others came may
// register again. After that it notes that the rank left. The caller holds
// s.mu.
func (s *Server) unregisterLocked(c *serverConn) {
	if c.member == nil || s.failure != nil {
		return
	}
	m, ok := s.members[c.member.Rank]
	switch {
	case !ok || m.c != c:
	case !s.complete:
		delete(s.members, c.member.Rank)
	default:
		m.left = true
		s.members[c.member.Rank] = m
	}
}

// Register tells the store who this process is. It fails with a
// *StoreError wrapping ErrJobMismatch when the store serves another job,
// ErrSizeMismatch when an earlier rank registered another world size, or
// ErrDuplicateRank when another process holds the rank; the last two stop
// the rendezvous for every rank.
func (c *Client) Register(ctx context.Context, id Identity) error {
	if err := id.validate(); err != nil {
		return fmt.Errorf("bootstrap: registering with the store at %s: %w", c.addr, err)
	}
	b, err := json.Marshal(id)
	if err != nil {
		return err
	}
	_, err = c.call(ctx, frameRegister, "", b)
	return err
}

// Roster asks the store who has registered so far.
func (c *Client) Roster(ctx context.Context) (Roster, error) {
	f, err := c.call(ctx, frameRoster, "", nil)
	if err != nil {
		return Roster{}, err
	}
	return decodeRoster(f.value)
}

package transport

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrClosed is wrapped by every transport operation on a transport that
	// has been closed, locally or by an abort.
	ErrClosed = errors.New("transport closed")
	// ErrPeerGone is wrapped when a peer's connection ended: the process died,
	// closed its communicator or aborted after an error of its own.
	ErrPeerGone = errors.New("peer connection lost")
	// ErrMismatch is matched (errors.Is) by every *MismatchError.
	ErrMismatch = errors.New("ranks disagree on the operation")
	// ErrRejected is wrapped when a connection failed the handshake: wrong
	// job, wrong rank or not a collkit peer at all.
	ErrRejected = errors.New("connection rejected")
	// ErrBadPeer is wrapped when a peer rank is out of range or is the caller.
	ErrBadPeer = errors.New("invalid peer rank")
	// ErrNoAnswer is wrapped by Pinger.Ping when the peer's process did not
	// answer before the context ended: it is stopped (SIGSTOP), hung, or
	// cut off by the network, though its kernel may still hold the
	// connection open.
	ErrNoAnswer = errors.New("peer did not answer a liveness probe")
)

// NoAnswerError is the ErrNoAnswer of a Pinger that can tell why the peer
// cannot answer without waiting for it (shared memory reads the peer's
// process state): Why says what it found.
type NoAnswerError struct{ Why string }

func (e *NoAnswerError) Error() string { return ErrNoAnswer.Error() + ": " + e.Why }

// Is makes errors.Is(err, ErrNoAnswer) true.
func (e *NoAnswerError) Is(target error) bool { return target == ErrNoAnswer }

// PeerError is an error in an operation with one peer.
type PeerError struct {
	Rank int    // the peer's rank
	Addr string // the peer's address, if the transport has one
	Op   string // "send", "recv", "connect", "accept", ...
	Err  error
}

func (e *PeerError) Error() string {
	if e.Addr != "" {
		return fmt.Sprintf("%s rank %d (%s): %v", e.Op, e.Rank, e.Addr, e.Err)
	}
	return fmt.Sprintf("%s rank %d: %v", e.Op, e.Rank, e.Err)
}

func (e *PeerError) Unwrap() error { return e.Err }

// MismatchError reports a message whose header differs from the one the
// receiver expected: the ranks called different operations.
type MismatchError struct {
	Peer      int
	Want, Got Header
}

// AlgorithmName, when set, names algorithm id of collective coll in a
// MismatchError's message (collkit sets it to its registry's names); where
// it is nil or returns "", the id is printed.
var AlgorithmName func(coll Coll, id uint8) string

func algorithmName(coll Coll, id uint8) string {
	if AlgorithmName != nil {
		if name := AlgorithmName(coll, id); name != "" {
			return name
		}
	}
	return fmt.Sprint(id)
}

func (e *MismatchError) Error() string {
	var diff []string
	add := func(name string, want, got any) {
		if want != got {
			diff = append(diff, fmt.Sprintf("%s: this rank %v, peer %v", name, want, got))
		}
	}
	w, g := e.Want, e.Got
	add("sequence", w.Seq, g.Seq)
	add("collective", w.Coll, g.Coll)
	if w.Algo != g.Algo {
		add("algorithm", algorithmName(w.Coll, w.Algo), algorithmName(g.Coll, g.Algo))
	}
	add("count", w.Count, g.Count)
	add("dtype", w.DType, g.DType)
	add("op", w.Op, g.Op)
	add("root", w.Root, g.Root)
	add("communicator", w.Comm, g.Comm)
	add("step", w.Step, g.Step)
	add("message bytes", w.Len, g.Len)
	what := "count, dtype, op and root"
	if w.Algo != g.Algo && w.Coll == g.Coll {
		what = "algorithm (Options.Algorithm, Comm.SetAlgorithm), count, dtype, op and root"
	}
	return fmt.Sprintf("message from rank %d does not match this rank's operation (%s); every rank must call the same collectives in the same order with the same %s",
		e.Peer, strings.Join(diff, "; "), what)
}

// Is makes errors.Is(err, ErrMismatch) true.
func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }

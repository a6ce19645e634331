package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Every connection opens with a handshake of small messages, each
//
//	magic "CKTC" | version uint8 | type uint8 | bodyLen uint16 | body
//
// little endian. The dialer sends a hello; the acceptor answers accept or
// reject. With a job secret (Config.Secret) the hello carries flagAuth and
// two messages come between hello and answer: a challenge (acceptor ->
// dialer, a fresh nonce) and a proof (dialer -> acceptor, its own nonce and
// an HMAC of both nonces and the hello under the secret). The accept then
// carries the acceptor's HMAC, so each side knows the other holds the
// secret; see auth.go.
//
// A liveness probe (ping.go) is a connection whose hello carries flagPing:
// the same handshake, and after the accept one more message from the
// acceptor, msgWaits, before both sides close it.
const (
	hsMagic      = "CKTC"
	hsVersion    = 1
	hsPrefix     = 8   // magic, version, type, body length
	hsMaxBody    = 512 // longer than any message of this version
	maxJobIDLen  = 255
	msgHello     = 1
	msgAccept    = 2
	msgReject    = 3
	msgChallenge = 4                         // body: acceptor nonce
	msgProof     = 5                         // body: dialer nonce, dialer MAC
	msgWaits     = 6                         // body: the acceptor's waits, after the accept of a ping (ping.go)
	helloFixed   = 4 + 4 + 4 + 2 + 2 + 2 + 1 // rank, target, size, stream, streams, flags, job length
	rejectFixed  = 1 + 4 + 4 + 2 + 1         // reason, rank, size, streams, job length
	acceptLength = 0
)

// errBadHandshake is wrapped when bytes on a new connection are not a
// handshake of this version.
var errBadHandshake = errors.New("not a collkit tcp handshake")

// hello is what a dialer says about itself and the connection it wants.
type hello struct {
	Rank    uint32 // the dialer's rank
	Target  uint32 // the rank it means to reach
	Size    uint32 // its world size
	Stream  uint16 // which of the Streams connections to Target this is
	Streams uint16 // its streams per peer
	Flags   uint16 // capabilities (flagAuth) and kind (flagPing); unknown ones are ignored
	JobID   string
}

// Reasons an acceptor gives for rejecting a hello.
type reason uint8

const (
	reasonVersion   reason = iota + 1 // another handshake version
	reasonJob                         // another job id
	reasonTarget                      // the acceptor is not the rank asked for
	reasonSize                        // another world size
	reasonStreams                     // another number of streams
	reasonRank                        // the dialer's rank cannot dial the acceptor
	reasonStream                      // stream index out of range
	reasonDuplicate                   // that rank and stream are already connected
	reasonMalformed                   // the hello did not parse
	reasonAuth                        // the job secret check failed
	reasonBuilt                       // the mesh is built: only pings are answered
)

var reasonNames = [...]string{
	reasonVersion:   "another handshake version",
	reasonJob:       "another job id",
	reasonTarget:    "asked for another rank",
	reasonSize:      "another world size",
	reasonStreams:   "another number of streams",
	reasonRank:      "a rank that does not dial this one",
	reasonStream:    "stream index out of range",
	reasonDuplicate: "rank and stream already connected",
	reasonMalformed: "malformed hello",
	reasonAuth:      "job secret check failed",
	reasonBuilt:     "mesh already built",
}

func (r reason) String() string {
	if int(r) < len(reasonNames) && reasonNames[r] != "" {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// reply is an acceptor's answer. A reject carries the acceptor's own view so
// the dialer's error can say what differs.
type reply struct {
	Accept  bool
	Authed  bool         // an accept that carries MAC (authenticated handshake)
	MAC     [macLen]byte // the acceptor's proof, when Authed
	Reason  reason       // when !Accept
	Rank    uint32       // the acceptor's rank, size, streams and job id (reject only)
	Size    uint32
	Streams uint16
	JobID   string
}

func appendMsg(dst []byte, typ byte, bodyLen int) []byte {
	dst = append(dst, hsMagic...)
	dst = append(dst, hsVersion, typ)
	return binary.LittleEndian.AppendUint16(dst, uint16(bodyLen))
}

// appendHello appends h's message to dst. h.JobID must be at most
// maxJobIDLen bytes.
func appendHello(dst []byte, h hello) []byte {
	dst = appendMsg(dst, msgHello, helloFixed+len(h.JobID))
	dst = binary.LittleEndian.AppendUint32(dst, h.Rank)
	dst = binary.LittleEndian.AppendUint32(dst, h.Target)
	dst = binary.LittleEndian.AppendUint32(dst, h.Size)
	dst = binary.LittleEndian.AppendUint16(dst, h.Stream)
	dst = binary.LittleEndian.AppendUint16(dst, h.Streams)
	dst = binary.LittleEndian.AppendUint16(dst, h.Flags)
	dst = append(dst, byte(len(h.JobID)))
	return append(dst, h.JobID...)
}

// appendReply appends r's message to dst.
func appendReply(dst []byte, r reply) []byte {
	if r.Accept {
		if r.Authed {
			dst = appendMsg(dst, msgAccept, macLen)
			return append(dst, r.MAC[:]...)
		}
		return appendMsg(dst, msgAccept, acceptLength)
	}
	dst = appendMsg(dst, msgReject, rejectFixed+len(r.JobID))
	dst = append(dst, byte(r.Reason))
	dst = binary.LittleEndian.AppendUint32(dst, r.Rank)
	dst = binary.LittleEndian.AppendUint32(dst, r.Size)
	dst = binary.LittleEndian.AppendUint16(dst, r.Streams)
	dst = append(dst, byte(len(r.JobID)))
	return append(dst, r.JobID...)
}

// errVersion is wrapped by checkPrefix when the magic is right but the
// version is not, so the acceptor can say so instead of just hanging up.
var errVersion = errors.New("another handshake version")

// checkPrefix validates a message prefix and returns the type and body
// length it announces.
func checkPrefix(b []byte) (typ byte, bodyLen int, err error) {
	if len(b) < hsPrefix {
		return 0, 0, fmt.Errorf("%w: %d bytes", errBadHandshake, len(b))
	}
	if string(b[:4]) != hsMagic {
		return 0, 0, fmt.Errorf("%w: starts with %q", errBadHandshake, b[:4])
	}
	if b[4] != hsVersion {
		return 0, 0, fmt.Errorf("%w: version %d, this build speaks %d: %w", errBadHandshake, b[4], hsVersion, errVersion)
	}
	n := int(binary.LittleEndian.Uint16(b[6:]))
	if n > hsMaxBody {
		return 0, 0, fmt.Errorf("%w: body of %d bytes", errBadHandshake, n)
	}
	return b[5], n, nil
}

// splitMsg checks a whole message and returns its type and body.
func splitMsg(b []byte) (byte, []byte, error) {
	typ, n, err := checkPrefix(b)
	if err != nil {
		return 0, nil, err
	}
	if len(b) != hsPrefix+n {
		return 0, nil, fmt.Errorf("%w: %d bytes, prefix announces %d", errBadHandshake, len(b), hsPrefix+n)
	}
	return typ, b[hsPrefix:], nil
}

// decodeHello parses a whole hello message.
func decodeHello(b []byte) (hello, error) {
	typ, body, err := splitMsg(b)
	if err != nil {
		return hello{}, err
	}
	if typ != msgHello {
		return hello{}, fmt.Errorf("%w: message type %d, want a hello", errBadHandshake, typ)
	}
	if len(body) < helloFixed || len(body) != helloFixed+int(body[helloFixed-1]) {
		return hello{}, fmt.Errorf("%w: hello body of %d bytes", errBadHandshake, len(body))
	}
	return hello{
		Rank:    binary.LittleEndian.Uint32(body[0:]),
		Target:  binary.LittleEndian.Uint32(body[4:]),
		Size:    binary.LittleEndian.Uint32(body[8:]),
		Stream:  binary.LittleEndian.Uint16(body[12:]),
		Streams: binary.LittleEndian.Uint16(body[14:]),
		Flags:   binary.LittleEndian.Uint16(body[16:]),
		JobID:   string(body[helloFixed:]),
	}, nil
}

// decodeReply parses a whole accept or reject message.
func decodeReply(b []byte) (reply, error) {
	typ, body, err := splitMsg(b)
	if err != nil {
		return reply{}, err
	}
	switch typ {
	case msgAccept:
		switch len(body) {
		case acceptLength:
			return reply{Accept: true}, nil
		case macLen:
			r := reply{Accept: true, Authed: true}
			copy(r.MAC[:], body)
			return r, nil
		}
		return reply{}, fmt.Errorf("%w: accept body of %d bytes", errBadHandshake, len(body))
	case msgReject:
		if len(body) < rejectFixed || len(body) != rejectFixed+int(body[rejectFixed-1]) {
			return reply{}, fmt.Errorf("%w: reject body of %d bytes", errBadHandshake, len(body))
		}
		return reply{
			Reason:  reason(body[0]),
			Rank:    binary.LittleEndian.Uint32(body[1:]),
			Size:    binary.LittleEndian.Uint32(body[5:]),
			Streams: binary.LittleEndian.Uint16(body[9:]),
			JobID:   string(body[rejectFixed:]),
		}, nil
	}
	return reply{}, fmt.Errorf("%w: message type %d, want accept or reject", errBadHandshake, typ)
}

// readMsg reads one whole handshake message from r.
func readMsg(r io.Reader) ([]byte, error) {
	var b [hsPrefix + hsMaxBody]byte
	if _, err := io.ReadFull(r, b[:hsPrefix]); err != nil {
		return nil, err
	}
	_, n, err := checkPrefix(b[:hsPrefix])
	if err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(r, b[hsPrefix:hsPrefix+n]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return append([]byte(nil), b[:hsPrefix+n]...), nil
}

// explain turns a reject into a sentence for the dialer's user.
func (r reply) explain(h hello) string {
	switch r.Reason {
	case reasonVersion:
		return "it speaks another handshake version: run the same collkit build on every rank"
	case reasonJob:
		return fmt.Sprintf("it belongs to job %q and this rank to job %q: processes of different jobs met; "+
			"give every rank of a job the same COLLKIT_JOB_ID, and each job its own MASTER_PORT", r.JobID, h.JobID)
	case reasonTarget:
		return fmt.Sprintf("the process there is rank %d, not rank %d: the address in the store is stale, "+
			"or two processes were given the same rank", r.Rank, h.Target)
	case reasonSize:
		return fmt.Sprintf("it runs with world size %d and this rank with %d: start every rank with the same WORLD_SIZE", r.Size, h.Size)
	case reasonStreams:
		return fmt.Sprintf("it uses %d streams per peer and this rank %d: every rank needs the same tcp.Config.Streams", r.Streams, h.Streams)
	case reasonRank, reasonStream:
		return fmt.Sprintf("it does not expect stream %d from rank %d", h.Stream, h.Rank)
	case reasonDuplicate:
		return fmt.Sprintf("it already has stream %d from rank %d: two processes claim rank %d", h.Stream, h.Rank, h.Rank)
	case reasonMalformed:
		return "it could not parse this rank's handshake: run the same collkit build on every rank"
	case reasonBuilt:
		return "it has built its mesh and takes no new streams: the stream comes from a process restarted " +
			"after the job began, or from another rank's late retry; restart the whole job"
	case reasonAuth:
		if h.Flags&flagAuth == 0 {
			return "it requires the job secret and this rank has none: give every rank the same COLLKIT_SECRET " +
				"(collbench's launcher sets it; with torchrun, mpirun or srun export it yourself)"
		}
		return "the job secret check failed: the ranks were given different COLLKIT_SECRET values, " +
			"or it runs without one; give every rank of the job the same secret"
	}
	return fmt.Sprintf("reason code %d", r.Reason)
}

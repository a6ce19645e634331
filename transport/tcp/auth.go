package tcp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
)

// Authentication is a challenge-response under the job secret
// (Config.Secret), mutual and fresh on every connection:
//
//	dialer   -> hello with flagAuth
//	acceptor -> challenge: nonceA (32 random bytes)
//	dialer   -> proof: nonceD, HMAC-SHA256(secret, "collkit/tcp/dialer" | nonceA | nonceD | hello)
//	acceptor -> accept: HMAC-SHA256(secret, "collkit/tcp/acceptor" | nonceA | nonceD | hello)
//	            or reject (reasonAuth)
//
// The hello is covered by the MACs, so its rank, size and job id are
// authenticated too; a recorded exchange cannot be replayed because nonceA
// is new on every connection. The secret never crosses the wire. The bytes
// after the handshake are not authenticated: that takes TLS (Config.TLS).
const (
	flagAuth = 1 << 0 // hello: the dialer holds a job secret and expects a challenge
	flagPing = 1 << 1 // hello: a liveness probe, not a stream of the mesh (ping.go)
	nonceLen = 32
	macLen   = sha256.Size
	// MinSecretLen is the shortest job secret Config accepts.
	MinSecretLen = 16
)

var (
	labelDialer   = []byte("collkit/tcp/dialer")
	labelAcceptor = []byte("collkit/tcp/acceptor")
)

// handshakeMAC is the proof that one side of a connection holds secret.
func handshakeMAC(secret, label []byte, nonceA, nonceD *[nonceLen]byte, helloMsg []byte) [macLen]byte {
	m := hmac.New(sha256.New, secret)
	m.Write(label)
	m.Write(nonceA[:])
	m.Write(nonceD[:])
	m.Write(helloMsg)
	var out [macLen]byte
	m.Sum(out[:0])
	return out
}

func newNonce() (n [nonceLen]byte) {
	rand.Read(n[:]) // crypto/rand.Read never fails on supported platforms
	return n
}

// proof is the dialer's answer to a challenge.
type proof struct {
	Nonce [nonceLen]byte
	MAC   [macLen]byte
}

func appendChallenge(dst []byte, nonce *[nonceLen]byte) []byte {
	dst = appendMsg(dst, msgChallenge, nonceLen)
	return append(dst, nonce[:]...)
}

func appendProof(dst []byte, p proof) []byte {
	dst = appendMsg(dst, msgProof, nonceLen+macLen)
	dst = append(dst, p.Nonce[:]...)
	return append(dst, p.MAC[:]...)
}

// decodeChallenge parses a whole challenge message.
func decodeChallenge(b []byte) (nonce [nonceLen]byte, err error) {
	typ, body, err := splitMsg(b)
	if err != nil {
		return nonce, err
	}
	if typ != msgChallenge || len(body) != nonceLen {
		return nonce, fmt.Errorf("%w: message type %d with %d bytes, want a challenge", errBadHandshake, typ, len(body))
	}
	copy(nonce[:], body)
	return nonce, nil
}

// decodeProof parses a whole proof message.
func decodeProof(b []byte) (p proof, err error) {
	typ, body, err := splitMsg(b)
	if err != nil {
		return p, err
	}
	if typ != msgProof || len(body) != nonceLen+macLen {
		return p, fmt.Errorf("%w: message type %d with %d bytes, want a proof", errBadHandshake, typ, len(body))
	}
	copy(p.Nonce[:], body)
	copy(p.MAC[:], body[nonceLen:])
	return p, nil
}

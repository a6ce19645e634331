package bootstrap

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
)

// With a job secret the store authenticates every client, and every client
// its server, by a challenge-response after the hello:
//
//	client -> hello
//	server -> challenge: nonceS (32 random bytes)
//	client -> proof: nonceC, HMAC-SHA256(secret, "collkit/store/client" | nonceS | nonceC)
//	server -> welcome: HMAC-SHA256(secret, "collkit/store/server" | nonceS | nonceC)
//
// A client that fails is logged and dropped before it can read or write a
// key. The secret never crosses the wire; nonces make every exchange fresh.
const (
	nonceLen = 32
	macLen   = sha256.Size
	// MinSecretLen is the shortest job secret the store accepts.
	MinSecretLen = 16
)

var (
	labelClient = []byte("collkit/store/client")
	labelServer = []byte("collkit/store/server")
)

func storeMAC(secret, label, nonceS, nonceC []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(label)
	m.Write(nonceS)
	m.Write(nonceC)
	return m.Sum(nil)
}

func newNonce() []byte {
	b := make([]byte, nonceLen)
	rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return b
}

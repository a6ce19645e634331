package tcp

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"
)

// Config configures one rank's Transport. Every rank of a job must use the
// same Size, JobID and Streams.
type Config struct {
	Rank, Size int
	// JobID must be the same on every rank; a connection from a process with
	// another job id is rejected. At most 255 bytes.
	JobID string
	// Secret is the job secret every connection proves with an HMAC
	// challenge-response in its handshake (see auth.go): a process without
	// it cannot join the mesh. Every rank must have the same secret, of at
	// least MinSecretLen bytes. Nil means no authentication: connections are
	// checked for job id, rank and world size only, so any process that can
	// reach the port and guesses them can join.
	Secret []byte
	// TLS, when set, wraps every connection in TLS before the collkit
	// handshake, for links that cross untrusted networks; LoadTLS builds one
	// for mutual TLS under a job CA. Every rank must have TLS on or off
	// alike. Nil means plain TCP.
	TLS *tls.Config
	// Addr is the IP address or host name this rank listens on and
	// advertises to the others. Empty means 127.0.0.1, which only works when
	// all ranks share a host; across hosts use an address the others can
	// reach, such as bootstrap.LocalAddrFor(masterAddr).
	Addr string
	// Streams is the number of TCP connections per peer. Zero means 1.
	// Payloads of at least 2*MinPiece bytes are cut into pieces of at least
	// MinPiece bytes spread over the streams and moved concurrently.
	Streams int
	// SocketBuffer sets SO_SNDBUF and SO_RCVBUF in bytes. Zero means 4 MiB.
	SocketBuffer int
	// Congestion names the TCP congestion control of every connection
	// (Linux's TCP_CONGESTION), as in net.ipv4.tcp_congestion_control.
	// It is set before each connection starts (on the dialing socket and
	// the listener), so no other control's start-up runs on it. Empty
	// means the first of cubic and reno that the kernel lets this process
	// set (reno always is), whatever the system's default is: pacing
	// controls such as bbr send a collective's bursts at the rate they
	// estimated from earlier, application-limited traffic, which on
	// loopback made 1 and 16 MiB transfers take 3.5-4x as long as with
	// cubic (BenchmarkPingPong, 2026-11-24, 2 cores). CongestionSystem
	// keeps the system's default. Any other name is set on every
	// connection, or New fails saying which names this process may set.
	Congestion string
	// ConnectTimeout bounds how long Connect keeps trying to reach the
	// other ranks, and waits for them to reach this one, once their
	// addresses are known. Zero means 30 s.
	ConnectTimeout time.Duration
	// SpinWait is how long a receive polls the socket for its message
	// before parking the goroutine, trading CPU for latency as MPI's
	// progress engines do. Between polls it yields the core, so ranks that
	// outnumber the cores still make progress. Zero learns it per peer from
	// how long that peer's recent messages took to arrive and what
	// sleeping has cost (internal/spin: twice the longest recent wait, 50
	// us to 1 ms, 20 us while waits average longer, and at least 4 times
	// what recent sleeps cost, up to 10 ms); positive fixes it; negative
	// disables polling.
	SpinWait time.Duration
	// Listener, when set, is the socket this rank accepts its peers on,
	// opened by the caller so that it could tell its address before the
	// ranks were numbered (collkit's elastic rounds do; Listen opens one
	// whose connections run Congestion from their start); Addr is then not
	// used. The Transport closes it (Close, or a Connect that fails); a
	// caller whose New fails still owns it. Nil means Connect listens on
	// Addr.
	Listener net.Listener
	// Peers, when set, is the address every rank listens on, by rank
	// (Listener's own at Rank), learned by the caller: Connect then dials
	// them without exchanging addresses through its store, which is not
	// used. It needs Listener. Nil means Connect publishes this rank's
	// address in the store and reads the others'.
	Peers []string
}

// Defaults and limits of Config.
const (
	DefaultSocketBuffer   = 4 << 20
	DefaultConnectTimeout = 30 * time.Second
	// CongestionSystem, as Config.Congestion, keeps the kernel's default
	// congestion control.
	CongestionSystem = "system"
	MaxStreams       = 64
	// MinPiece is the smallest piece a payload is cut into for several
	// streams; only payloads of at least 2*MinPiece are cut.
	MinPiece = 64 << 10
)

// defaultCongestion are the congestion controls an empty Config.Congestion
// tries, in order.
var defaultCongestion = []string{"cubic", "reno"}

// withDefaults validates c and fills in its zero values.
func (c Config) withDefaults() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("tcp: invalid config for rank %d: "+format, append([]any{c.Rank}, args...)...)
	}
	switch {
	case c.Size < 1:
		return bad("Size %d: a job has at least 1 rank", c.Size)
	case c.Rank < 0 || c.Rank >= c.Size:
		return bad("Rank must be in [0, %d)", c.Size)
	case len(c.JobID) > maxJobIDLen:
		return bad("JobID of %d bytes, limit %d", len(c.JobID), maxJobIDLen)
	case c.Secret != nil && len(c.Secret) < MinSecretLen:
		return bad("Secret of %d bytes: use at least %d random bytes, the same on every rank", len(c.Secret), MinSecretLen)
	case c.Streams < 0 || c.Streams > MaxStreams:
		return bad("Streams %d: want 0 (meaning 1) to %d", c.Streams, MaxStreams)
	case c.SocketBuffer < 0:
		return bad("SocketBuffer %d is negative", c.SocketBuffer)
	case c.ConnectTimeout < 0:
		return bad("ConnectTimeout %v is negative", c.ConnectTimeout)
	case c.Peers != nil && c.Listener == nil:
		return bad("Peers without a Listener: the others would dial an address nobody listens on")
	case c.Peers != nil && len(c.Peers) != c.Size:
		return bad("%d Peers for Size %d: give every rank's address, this one's too", len(c.Peers), c.Size)
	case c.Peers != nil && c.Peers[c.Rank] != c.Listener.Addr().String():
		return bad("Peers[%d] is %q but Listener listens on %s", c.Rank, c.Peers[c.Rank], c.Listener.Addr())
	}
	if c.Addr == "" {
		c.Addr = "127.0.0.1"
	}
	if _, _, err := net.SplitHostPort(c.Addr); err == nil {
		return bad("Addr %q: give only the host; the port is chosen when Connect listens", c.Addr)
	}
	if ip := net.ParseIP(c.Addr); ip != nil && ip.IsUnspecified() {
		return bad("Addr %q is not an address other ranks can reach: use this host's IP, e.g. bootstrap.LocalAddrFor(masterAddr)", c.Addr)
	}
	if c.Streams == 0 {
		c.Streams = 1
	}
	if c.SocketBuffer == 0 {
		c.SocketBuffer = DefaultSocketBuffer
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	return c, nil
}

// pieces returns how many pieces a payload of n bytes is cut into for
// streams streams: one below 2*MinPiece, else as many as there are streams
// while each piece keeps at least MinPiece bytes.
func pieces(n, streams int) int {
	if streams <= 1 || n < 2*MinPiece {
		return 1
	}
	return min(streams, n/MinPiece)
}

// pieceBounds returns the byte range [lo, hi) of piece i of k of an n-byte
// payload. Pieces differ in length by at most one byte.
func pieceBounds(n, k, i int) (lo, hi int) {
	return int(int64(i) * int64(n) / int64(k)), int(int64(i+1) * int64(n) / int64(k))
}

// Package tcp is collkit's TCP transport: every pair of ranks talks over
// one or more TCP connections, set up through a bootstrap.Store.
//
//	t, err := tcp.New(tcp.Config{Rank: env.Rank, Size: env.Size, JobID: env.JobID,
//		Addr: bootstrap.LocalAddrFor(env.StoreAddr()), Streams: 2})
//	err = t.Connect(ctx, store) // full mesh, handshakes checked
//	defer t.Close()
//
// # Setup
//
// Connect listens on Config.Addr, publishes "ip:port" under
// "tcp/addr/<rank>" in the store and reads every other rank's address. Each
// rank dials the ranks below it, Config.Streams times each, and accepts the
// ranks above it. A dialer opens with a hello naming the job id, its rank,
// the rank it wants, the world size, the stream index and the stream count;
// the acceptor checks all of them and answers accept or reject with a reason
// the dialer turns into an error that says what differs. Connections that
// are not collkit peers of this job (garbage, another job, a silent port
// scanner) are rejected and logged with log/slog at Warn level, and Connect
// keeps waiting for the real peers. Dialing retries with backoff, bounded by
// Config.ConnectTimeout and the context. Once the mesh is built the listener
// stays open, until Close, only to answer liveness probes (Ping, see
// ping.go): the same handshake with a ping flag, answered with what this
// rank is waiting on. Other hellos are rejected.
//
// # Wire format
//
// Every message is its 40-byte transport.Header followed by the payload.
// Payloads up to 16 KiB are copied behind the header and go out in one
// write; larger ones go out with writev, without a copy, and are read
// straight into the receiver's buffer. With several streams, a payload of at
// least 2*MinPiece bytes is cut into k = min(Streams, len/MinPiece) pieces
// of nearly equal length (piece i is [i*len/k, (i+1)*len/k)), and piece i
// travels on stream i, each behind a copy of the message's header (Len is
// the whole message's length), so both sides cut the same way and a
// mismatch is still caught on every stream. Pieces move concurrently on
// per-stream goroutines that live as long as the transport.
//
// # Errors
//
// Errors about one peer are *transport.PeerError values naming its rank and
// address. A peer that exits shows up as transport.ErrPeerGone, a context
// that ends as its own error (the connection stays usable when no byte had
// moved yet), and calls after Close as transport.ErrClosed. Any other error,
// and any mismatch, leaves the byte stream out of step: the connections to
// that peer are closed, which tells the peer, and later calls fail at once.
//
// For failure reports the Transport is also a transport.Aborter (Abort sends
// each peer a notice with the reason), a transport.Prober (Dead names peers
// whose connections closed without one), a transport.WaitReporter (Waits)
// and a transport.Pinger: Ping tells a stuck peer (stopped, hung: no answer
// within the context) from a live one and from one that is gone.
package tcp

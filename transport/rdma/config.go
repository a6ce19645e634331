package rdma

import (
	"errors"
	"fmt"
	"os"
	"time"
)

// ErrNotBuilt is returned by New and Local in a build without the rdma tag.
var ErrNotBuilt = errors.New("rdma: built without RDMA support: rebuild with -tags rdma and libucx-dev installed")

// ErrNotConnected is wrapped by Send and Recv on a Transport whose Connect
// has not succeeded.
var ErrNotConnected = errors.New("rdma: transport not connected; call Connect first")

// Config configures one rank's Transport. Every rank of a job must use the
// same Size and JobID.
type Config struct {
	Rank, Size int
	// JobID must be the same on every rank; Connect rejects a peer whose
	// hello names another job. At most 255 bytes.
	JobID string
	// Interface is the network interface the bootstrap uses (for example the
	// one holding bootstrap.LocalAddrFor(masterAddr)). When NetDevices is
	// empty and $UCX_NET_DEVICES is unset, the RDMA device port behind it
	// (DeviceForInterface) becomes UCX's NET_DEVICES. Empty means no device
	// selection: UCX picks.
	Interface string
	// NetDevices is passed to UCX as NET_DEVICES ("mlx5_0:1", "eth0", ...).
	// Empty means $UCX_NET_DEVICES, else the device behind Interface, else
	// UCX's default (all).
	NetDevices string
	// Transports is passed to UCX as TLS ("tcp", "sm", "rc,sm", ...). Empty
	// means $UCX_TLS, else UCX's default (all it finds).
	Transports string
	// StagingBytes is the largest payload copied through a registered
	// staging buffer; larger payloads go zero-copy from the caller's memory.
	// Zero means DefaultStagingBytes; negative means always zero-copy.
	StagingBytes int
	// SpinWait is how long a waiting Send or Recv polls the UCX worker
	// before sleeping on its event file descriptor. Zero means
	// DefaultSpinWait; negative means no polling.
	SpinWait time.Duration
	// ConnectTimeout bounds how long Connect waits for every peer's hello
	// once the worker addresses are known. Zero means 30 s.
	ConnectTimeout time.Duration
	// PeerTimeout is how long UCX may take to declare a silent peer failed
	// (UCX_KEEPALIVE_INTERVAL, for transports with no connection to break,
	// such as shared memory). Zero means $UCX_KEEPALIVE_INTERVAL, else 2 s.
	PeerTimeout time.Duration
}

// Defaults and limits of Config.
const (
	DefaultStagingBytes   = 16 << 10
	DefaultSpinWait       = 20 * time.Microsecond
	DefaultConnectTimeout = 30 * time.Second
	DefaultPeerTimeout    = 2 * time.Second
	// MaxSize is the largest world: tags carry the source rank in 19 bits.
	MaxSize     = 1 << rankBits
	maxJobIDLen = 255
)

// Tag layout: bit 63 marks control messages (hello, bye); bits 62..44 the
// source rank; bits 43..0 the message's sequence number within its ordered
// pair of ranks (control messages put their kind there).
const (
	rankBits  = 19
	seqBits   = 44
	ctrlBit   = uint64(1) << 63
	seqMask   = uint64(1)<<seqBits - 1
	rankMask  = (uint64(1)<<rankBits - 1) << seqBits
	ctrlHello = 1
	ctrlBye   = 2
)

func dataTag(src int, seq uint64) uint64 { return uint64(src)<<seqBits | seq&seqMask }

func ctrlTag(src int, kind uint64) uint64 { return ctrlBit | uint64(src)<<seqBits | kind }

func tagRank(tag uint64) int { return int(tag & rankMask >> seqBits) }

// withDefaults validates c and fills in its zero values, and resolves the
// UCX settings (NET_DEVICES from Interface) that come from the environment.
func (c Config) withDefaults() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("rdma: invalid config for rank %d: "+format, append([]any{c.Rank}, args...)...)
	}
	switch {
	case c.Size < 1 || c.Size > MaxSize:
		return bad("Size %d: want 1 to %d ranks", c.Size, MaxSize)
	case c.Rank < 0 || c.Rank >= c.Size:
		return bad("Rank must be in [0, %d)", c.Size)
	case len(c.JobID) > maxJobIDLen:
		return bad("JobID of %d bytes, limit %d", len(c.JobID), maxJobIDLen)
	case c.ConnectTimeout < 0:
		return bad("ConnectTimeout %v is negative", c.ConnectTimeout)
	case c.PeerTimeout < 0:
		return bad("PeerTimeout %v is negative", c.PeerTimeout)
	}
	if c.StagingBytes == 0 {
		c.StagingBytes = DefaultStagingBytes
	}
	if c.StagingBytes < 0 {
		c.StagingBytes = 0
	}
	if c.SpinWait == 0 {
		c.SpinWait = DefaultSpinWait
	}
	if c.SpinWait < 0 {
		c.SpinWait = 0
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.NetDevices == "" && os.Getenv("UCX_NET_DEVICES") == "" && c.Interface != "" {
		if d, err := DeviceForInterface(c.Interface); err == nil {
			c.NetDevices = d.UCXName()
		}
	}
	if c.PeerTimeout == 0 && os.Getenv("UCX_KEEPALIVE_INTERVAL") == "" {
		c.PeerTimeout = DefaultPeerTimeout
	}
	return c, nil
}

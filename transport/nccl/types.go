package nccl

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/collkit/collkit/reduce"
	"github.com/collkit/collkit/transport"
)

// uniqueIDBytes is NCCL_UNIQUE_ID_BYTES.
const uniqueIDBytes = 128

// uniqueID is ncclUniqueId, passed to ncclCommInitRank by value.
type uniqueID struct{ Internal [uniqueIDBytes]byte }

// commConfig is ncclConfig_t as NCCL 2.18 defined it. NCCL
// reads Size bytes of it and keeps its defaults for later fields, so this
// prefix works with every newer NCCL.
type commConfig struct {
	Size           uintptr
	Magic          uint32
	Version        uint32
	Blocking       int32
	CGAClusterSize int32
	MinCTAs        int32
	MaxCTAs        int32
	NetName        uintptr // const char*
	SplitShare     int32
	_              int32
}

const (
	configMagic    = 0xcafebeef
	configUndefInt = math.MinInt32 // NCCL_CONFIG_UNDEF_INT
)

// configure is the config of a communicator in NCCL's blocking mode or
// not: a non-blocking one's calls return at once (ncclInProgress) and
// collkit polls them to the end.
func configure(blocking bool) *commConfig {
	b := int32(0)
	if blocking {
		b = 1
	}
	return &commConfig{
		Size:           unsafe.Sizeof(commConfig{}),
		Magic:          configMagic,
		Version:        21800, // NCCL_VERSION(2,18,0): the fields above are its ncclConfig_t
		Blocking:       b,
		CGAClusterSize: configUndefInt,
		MinCTAs:        configUndefInt,
		MaxCTAs:        configUndefInt,
		SplitShare:     configUndefInt,
	}
}

// ncclResult_t values.
const (
	ncclSuccess            = 0
	ncclUnhandledCudaError = 1
	ncclSystemError        = 2
	ncclInternalError      = 3
	ncclInvalidArgument    = 4
	ncclInvalidUsage       = 5
	ncclRemoteError        = 6
	ncclInProgress         = 7
)

// ncclSplitNoColor is NCCL_SPLIT_NOCOLOR.
const ncclSplitNoColor = -1

// ncclCommShrink's flags: NCCL_SHRINK_DEFAULT, and NCCL_SHRINK_ABORT, which
// first ends the operations the parent left unfinished (after an error).
const (
	ncclShrinkDefault = 0x00
	ncclShrinkAbort   = 0x01
)

// CUDA driver API values (cuda.h).
const (
	cuSuccess              = 0
	cuErrorNoDevice        = 100
	cuErrorNotReady        = 600
	cuStreamNonBlocking    = 1 // CU_STREAM_NON_BLOCKING
	cuMemHostAllocPortable = 1 // CU_MEMHOSTALLOC_PORTABLE

	// CUpointer_attribute and CUmemorytype.
	cuPointerAttrMemoryType    = 2
	cuPointerAttrDeviceOrdinal = 9
	cuPointerAttrRangeStart    = 11
	cuPointerAttrRangeSize     = 12
	cuMemoryTypeHost           = 1
	cuMemoryTypeDevice         = 2
	cuMemoryTypeUnified        = 4
)

const (
	ncclUint8           = 1
	ncclVersionCode2_10 = 21000 // ncclAvg and ncclBfloat16 appeared
	ncclVersionCode2_24 = 22400 // NCCL_ALGO takes a collective: "allreduce:tree"
	ncclVersionCode2_27 = 22700 // ncclCommShrink
	ncclVersionCode2_29 = 22900 // ncclCommGrow and ncclCommGetUniqueId
	ncclVersionCode2_30 = 23000 // several ranks on one GPU (NCCL_MULTI_RANK_GPU_ENABLE=1)
)

// ncclDataType_t for each collkit element type.
var dtypes = map[reduce.DType]int32{
	reduce.Uint8:    1, // ncclUint8
	reduce.Int32:    2, // ncclInt32
	reduce.Int64:    4, // ncclInt64
	reduce.Float16:  6, // ncclFloat16
	reduce.Float32:  7, // ncclFloat32
	reduce.Float64:  8, // ncclFloat64
	reduce.BFloat16: 9, // ncclBfloat16 (NCCL >= 2.10)
}

// ncclRedOp_t for each collkit operator.
var ops = map[reduce.Op]int32{
	reduce.Sum:  0, // ncclSum
	reduce.Prod: 1, // ncclProd
	reduce.Max:  2, // ncclMax
	reduce.Min:  3, // ncclMin
	reduce.Avg:  4, // ncclAvg (NCCL >= 2.10)
}

// ErrUnsupported is wrapped when a dtype or operator has no NCCL
// equivalent in the loaded NCCL version.
var ErrUnsupported = errors.New("not supported by this NCCL")

// ncclType maps dt for an NCCL of version v (ncclGetVersion's code).
func ncclType(dt reduce.DType, v int) (int32, error) {
	t, ok := dtypes[dt]
	if !ok {
		return 0, fmt.Errorf("data type %v: %w", dt, ErrUnsupported)
	}
	if dt == reduce.BFloat16 && v < ncclVersionCode2_10 {
		return 0, fmt.Errorf("data type bfloat16 needs NCCL 2.10 or newer, this is %s: %w", versionString(v), ErrUnsupported)
	}
	return t, nil
}

// ncclOp maps op for an NCCL of version v.
func ncclOp(op reduce.Op, v int) (int32, error) {
	o, ok := ops[op]
	if !ok {
		return 0, fmt.Errorf("reduction op %v: %w", op, ErrUnsupported)
	}
	if op == reduce.Avg && v < ncclVersionCode2_10 {
		return 0, fmt.Errorf("reduction op avg needs NCCL 2.10 or newer, this is %s: %w", versionString(v), ErrUnsupported)
	}
	return o, nil
}

// versionString renders ncclGetVersion's code (2.18.3 is 21803; before
// 2.9 it was 2708 for 2.7.8).
func versionString(v int) string {
	if v >= 10000 {
		return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/1000, v/100%10, v%100)
}

// algoEnv is the NCCL_ALGO value that makes an NCCL of version v run
// all-reduce with algo and leaves the other collectives alone. NCCL 2.24
// and newer take it per collective ("allreduce:tree"). Older ones take one
// algorithm for every collective: ring serves all of them, but tree
// serves only all-reduce (broadcast, all-gather and reduce-scatter would
// find no algorithm), so tree there is an error.
func algoEnv(algo string, v int) (string, error) {
	switch algo {
	case "":
		return "", nil
	case "ring", "tree":
		if v >= ncclVersionCode2_24 {
			return "allreduce:" + algo, nil
		}
		if algo == "ring" {
			return "Ring", nil
		}
		return "", fmt.Errorf("algorithm tree needs NCCL 2.24 or newer, this is %s: older NCCL takes NCCL_ALGO for every collective and has no tree broadcast, all-gather or reduce-scatter; use ring, or set NCCL_ALGO=Tree yourself if the job runs only all-reduce", versionString(v))
	}
	return "", fmt.Errorf("algorithm %q: NCCL runs ring or tree (NCCL_ALGO); use one of those, or empty to let NCCL choose", algo)
}

// CallError is a failed NCCL or CUDA driver call.
type CallError struct {
	Rank int    // this rank in the communicator
	Call string // "ncclAllReduce", "cuMemAlloc", ...
	Code int32  // ncclResult_t or CUresult
	Msg  string // the library's own description
}

func (e *CallError) Error() string {
	return fmt.Sprintf("rank %d: %s failed: %s (code %d)", e.Rank, e.Call, e.Msg, e.Code)
}

// Remote reports whether NCCL blamed another rank (ncclRemoteError).
func (e *CallError) Remote() bool {
	return len(e.Call) > 4 && e.Call[:4] == "nccl" && e.Code == ncclRemoteError
}

// Is makes errors.Is(err, transport.ErrPeerGone) true for a remote error:
// NCCL reports a peer whose process exited, or whose network failed, so.
func (e *CallError) Is(target error) bool { return target == transport.ErrPeerGone && e.Remote() }

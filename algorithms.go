package collkit

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"unicode"

	"github.com/collkit/collkit/algo/adaptive"
	"github.com/collkit/collkit/algo/halvingdoubling"
	"github.com/collkit/collkit/algo/hierarchical"
	"github.com/collkit/collkit/algo/pairwise"
	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/algo/tree"
	"github.com/collkit/collkit/transport"
)

// AllReduceFunc is the shape of an all-reduce algorithm (see algo/...): it
// reduces send over every rank of t into recv (which may be send), with the
// count, dtype and op of h, and sends h (with its own Step and Len) on every
// message, so that ranks that disagree get transport.ErrMismatch. t is the
// communicator's transport wrapped for statistics and traces. An
// AllReduceFunc is an Algorithm that needs no settings.
type AllReduceFunc func(ctx context.Context, t transport.Transport, h transport.Header, send, recv []byte) error

// Prepare returns f itself.
func (f AllReduceFunc) Prepare(AlgorithmSetup) (AllReduceFunc, error) { return f, nil }

// Algorithm is an all-reduce algorithm that Options.Algorithm,
// Comm.SetAlgorithm and collbench's --algo can name once it is registered
// with RegisterAlgorithm. A plain function is one (AllReduceFunc); an
// algorithm that depends on the communicator's settings implements Prepare.
type Algorithm interface {
	// Prepare returns the function a communicator runs for each all-reduce.
	// A communicator calls it when it takes the algorithm (New, Connect,
	// SetAlgorithm, Split), not per call; an error refuses the algorithm
	// on that communicator.
	Prepare(s AlgorithmSetup) (AllReduceFunc, error)
}

// AlgorithmSetup is what a communicator tells an Algorithm about itself.
type AlgorithmSetup struct {
	// Transport is the name of the communicator's transport ("tcp", "shm",
	// ...; Options.Transport, "tcp" when that is empty), the key of tuning
	// tables.
	Transport string
	// Nodes[r] is the node rank r runs on (see Options.Nodes); the same on
	// every rank.
	Nodes []int
	// Intra connects this rank with the other ranks of its node, over
	// shared memory or NCCL, when Connect made such a transport
	// (Options.IntraNode); nil otherwise.
	Intra transport.Transport
	// Tuning is the measured cost model of Options.Tuning, or nil.
	Tuning *adaptive.Table
}

// The algorithm registry. The id of a name is sent in the header of every
// message of an all-reduce, so it must be the same on every rank whatever
// order the ranks registered in: the built-ins have fixed ids, every other
// name gets a hash of itself (see algorithmID).
var (
	algorithmsMu sync.Mutex
	// algorithmNames[id] is the name registered with that id, "" for none.
	// An entry is written once, under algorithmsMu, before any communicator
	// can hold its id (findAlgorithm takes the lock), so a communicator
	// reads its own entry without the lock.
	algorithmNames [256]string
	algorithms     [256]Algorithm
	algorithmOrder []uint8 // registered ids in registration order
)

// Mismatch errors name the algorithms of the registry and of the other
// collectives rather than their header ids.
func init() {
	transport.AlgorithmName = func(coll transport.Coll, id uint8) string {
		if coll != transport.CollAllReduce {
			if name := collAlgorithmName(id); name != "-" {
				return name
			}
			return ""
		}
		algorithmsMu.Lock()
		defer algorithmsMu.Unlock()
		return algorithmNames[id]
	}
}

// builtinAlgorithms are the algorithms of this package, by id: the ids
// they had before registration existed, so that versions interoperate.
var builtinAlgorithms = []string{"ring", "tree", "halvingdoubling", "hierarchical", "adaptive", "native", "pairwise"}

func init() {
	// The built-ins register as users do; their Algorithm values are here.
	RegisterAlgorithm("ring", AllReduceFunc(ring.AllReduce))
	RegisterAlgorithm("tree", AllReduceFunc(tree.AllReduce))
	RegisterAlgorithm("halvingdoubling", AllReduceFunc(halvingdoubling.AllReduce))
	RegisterAlgorithm("hierarchical", prepareFunc(func(s AlgorithmSetup) (AllReduceFunc, error) {
		hc := hierarchical.Config{Nodes: s.Nodes}
		if s.Intra != nil {
			hc.IntraTransport, hc.Intra = s.Intra, intraAllReduce
		}
		return hc.AllReduce, nil
	}))
	RegisterAlgorithm("adaptive", prepareFunc(func(s AlgorithmSetup) (AllReduceFunc, error) {
		return adaptive.Config{Table: s.Tuning, Transport: s.Transport}.AllReduce, nil
	}))
	RegisterAlgorithm("native", AllReduceFunc(nativeAllReduce))
	RegisterAlgorithm("pairwise", AllReduceFunc(pairwise.AllReduce))
}

// prepareFunc is an Algorithm that is its Prepare method.
type prepareFunc func(AlgorithmSetup) (AllReduceFunc, error)

func (f prepareFunc) Prepare(s AlgorithmSetup) (AllReduceFunc, error) { return f(s) }

// Ids 0 to 15 are kept for built-in algorithms, and 0x80 to 0x8f for the
// adaptive algorithm, which sends 0x80 plus the index of the candidate it
// chose; the other 224 ids are for registered names.
const (
	builtinIDs  = 16
	adaptiveIDs = 0x80
)

// algorithmID is the header id of the named algorithm: its index among the
// built-ins, or an FNV-1a hash of the name over the ids the built-ins and
// adaptive leave free. It depends on the name alone. Changing it changes
// the wire format.
func algorithmID(name string) uint8 {
	if i := slices.Index(builtinAlgorithms, name); i >= 0 {
		return uint8(i)
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	id := builtinIDs + h.Sum32()%(256-2*builtinIDs)
	if id >= adaptiveIDs {
		id += builtinIDs
	}
	return uint8(id)
}

// RegisterAlgorithm makes an all-reduce algorithm available by name to
// Options.Algorithm, Comm.SetAlgorithm, Algorithms and collbench's --algo,
// as database/sql.Register does for drivers: call it from an init function
// of the package that provides the algorithm, and register the same names
// in every program of a job. The built-in algorithms are registered the same
// way.
//
// Every message of an all-reduce carries an 8-bit id derived from the name
// alone (a hash; the built-ins have fixed ids), so ranks that chose
// different algorithms get a transport.ErrMismatch error instead of a hang,
// whatever order they registered in. Two names can hash to the same id:
// RegisterAlgorithm refuses the second, and a job must then rename one.
//
// Like database/sql.Register, it panics if a is nil or name is already
// registered. It also panics if name is empty, is "all" or contains a comma
// or a space (collbench's --algo lists names with commas), and if name's id
// belongs to another registered name.
func RegisterAlgorithm(name string, a Algorithm) {
	if f, ok := a.(AllReduceFunc); a == nil || ok && f == nil {
		panic("collkit: RegisterAlgorithm: algorithm " + name + " is nil")
	}
	checkName("RegisterAlgorithm", name)
	algorithmsMu.Lock()
	defer algorithmsMu.Unlock()
	id := algorithmID(name)
	switch algorithmNames[id] {
	case "":
	case name:
		panic("collkit: RegisterAlgorithm called twice for algorithm " + name)
	default:
		panic(fmt.Sprintf("collkit: RegisterAlgorithm: algorithm %s has the same header id (%d) as the registered algorithm %s; rename one of them",
			name, id, algorithmNames[id]))
	}
	algorithmNames[id], algorithms[id] = name, a
	algorithmOrder = append(algorithmOrder, id)
}

// checkName panics if name cannot be registered.
func checkName(door, name string) {
	if name == "" || name == "all" || name == AutoTransport || strings.ContainsFunc(name, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) {
		panic(fmt.Sprintf("collkit: %s: name %q: use a non-empty name other than \"all\" and \"auto\", without commas or spaces", door, name))
	}
}

// Algorithms lists the names of the registered all-reduce algorithms,
// which Options.Algorithm accepts: the built-ins first, then the others in
// the order they were registered.
func Algorithms() []string {
	algorithmsMu.Lock()
	defer algorithmsMu.Unlock()
	names := make([]string, len(algorithmOrder))
	for i, id := range algorithmOrder {
		names[i] = algorithmNames[id]
	}
	return names
}

// findAlgorithm returns the id of the named algorithm; "" is "ring".
func findAlgorithm(name string) (uint8, error) {
	if name == "" {
		return 0, nil
	}
	id := algorithmID(name)
	algorithmsMu.Lock()
	known := algorithmNames[id] == name
	algorithmsMu.Unlock()
	if !known {
		return 0, fmt.Errorf("%w: unknown algorithm %q (use one of %v, or register it with collkit.RegisterAlgorithm)",
			ErrBadArgument, name, Algorithms())
	}
	return id, nil
}

// algorithm returns the function that runs the algorithm with header id id
// with this communicator's settings.
func (c *Comm) algorithm(id uint8) (AllReduceFunc, error) {
	algorithmsMu.Lock()
	name, a := algorithmNames[id], algorithms[id]
	algorithmsMu.Unlock()
	if n, ok := c.t.(transport.NativeCollectives); ok {
		return ncclAllReduce(c.t, n, name)
	}
	if a == nil {
		return nil, fmt.Errorf("%w: algorithm id %d is not registered", ErrBadArgument, id)
	}
	run, err := a.Prepare(AlgorithmSetup{Transport: c.transportName, Nodes: slices.Clone(c.nodes), Intra: c.intra, Tuning: c.tuning})
	if err == nil && run == nil {
		err = errors.New("Prepare returned no function")
	}
	if err != nil {
		return nil, fmt.Errorf("%w: algorithm %q: %w", ErrBadArgument, name, err)
	}
	return run, nil
}

package main

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/collkit/collkit"
	"github.com/collkit/collkit/algo/ring"
	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/transport"
)

// registerForTest registers a test algorithm and transport, once per
// process (registrations last as long as the program).
var registerForTest = sync.OnceFunc(func() {
	collkit.RegisterAlgorithm("collbench-test-ring", collkit.AllReduceFunc(ring.AllReduce))
	collkit.RegisterTransport("collbench-test-transport", collkit.TransportDriver{
		Connect: func(context.Context, bootstrap.Env, bootstrap.Store, collkit.Options) (transport.Transport, error) {
			panic("not connected in this test")
		},
	})
})

// Algorithms and transports registered in the program are what --algo and
// --transport accept, alone, in lists and in "all".
func TestRegisteredAlgorithmAndTransport(t *testing.T) {
	registerForTest()
	for _, s := range []string{"collbench-test-ring", "ring,collbench-test-ring", "all"} {
		algos, err := parseAlgos(s, false)
		if err != nil || !slices.Contains(algos, "collbench-test-ring") {
			t.Errorf("--algo %s: %v, %v; want the registered algorithm among them", s, algos, err)
		}
	}
	if _, err := parseAlgos("collbench-test-nothing", false); err == nil {
		t.Error("--algo with an unregistered name: no error")
	}
	for _, s := range []string{"collbench-test-transport", "tcp,collbench-test-transport", "all"} {
		run, _, err := parseTransports(s, collkit.Transports(), collkit.TransportAvailable)
		if err != nil || !slices.Contains(run, "collbench-test-transport") {
			t.Errorf("--transport %s: %v, %v; want the registered transport among them", s, run, err)
		}
	}
}

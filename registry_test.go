package collkit

import (
	"slices"
	"testing"
)

// registerAlgorithmForTest registers a through the public door and removes
// it when the test ends, so that tests can run more than once per process.
func registerAlgorithmForTest(t testing.TB, name string, a Algorithm) {
	t.Helper()
	RegisterAlgorithm(name, a)
	t.Cleanup(func() {
		algorithmsMu.Lock()
		defer algorithmsMu.Unlock()
		id := algorithmID(name)
		algorithmNames[id], algorithms[id] = "", nil
		algorithmOrder = slices.DeleteFunc(algorithmOrder, func(i uint8) bool { return i == id })
	})
}

// registerTransportForTest is registerAlgorithmForTest for transports.
func registerTransportForTest(t testing.TB, name string, d TransportDriver) {
	t.Helper()
	RegisterTransport(name, d)
	t.Cleanup(func() {
		transportsMu.Lock()
		defer transportsMu.Unlock()
		transportRegistry = slices.DeleteFunc(transportRegistry, func(e transportEntry) bool { return e.name == name })
	})
}

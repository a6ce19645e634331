package collkit

// WatchAsks is how many times a communicator's watch has asked its peers
// what they wait on (callWatch.ask), for the allocation tests.
func WatchAsks() uint64 { return watchAsks.Load() }

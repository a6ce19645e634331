package collkit

// subState is what a communicator knows about sub-communicators.
type subState struct{}

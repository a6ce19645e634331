package collkit

import (
	"testing"

	"github.com/collkit/collkit/transport"
)

// What the call watch adds to every collective: recording the call and
// clearing it (the timer is armed once and stays armed while calls run).
func BenchmarkCallWatch(b *testing.B) {
	c := &Comm{}
	h := transport.Header{Coll: transport.CollAllReduce, Count: 2, Root: -1}
	for i := range b.N {
		h.Seq = uint64(i)
		c.watch.begin(c, h)
		c.watch.end()
	}
}

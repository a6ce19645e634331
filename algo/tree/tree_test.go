package tree

import (
	"fmt"
	"testing"
)

// TestConstruction checks both trees for every world size up to 64: each is
// a binary tree over all ranks rooted where the package doc says, heights and
// depths are what the message order relies on, and the interior ranks of
// one tree are the leaves of the other.
func TestConstruction(t *testing.T) {
	for n := 1; n <= 64; n++ {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			var interior [2][]bool
			for tr := range 2 {
				interior[tr] = checkTree(t, n, tr)
			}
			if n == 1 {
				return
			}
			for r := range n {
				in0, in1 := interior[0][r], interior[1][r]
				switch {
				case n%2 == 1 && r == 0:
					if !in0 || !in1 {
						t.Errorf("odd n: rank 0 should be interior in both trees, got %v and %v", in0, in1)
					}
				case in0 == in1:
					t.Errorf("rank %d is interior in tree 0: %v, in tree 1: %v; want exactly one", r, in0, in1)
				}
			}
		})
	}
}

// checkTree checks tree tr of n ranks and returns which ranks are interior
// (have children).
func checkTree(t *testing.T, n, tr int) []bool {
	t.Helper()
	nodes := make([]node, n)
	for r := range n {
		nodes[r] = place(n, tr, r)
	}
	wantRoot := 0
	if tr == 1 && n > 1 {
		wantRoot = map[bool]int{true: n - 1, false: 1}[n%2 == 0]
	}
	H := treeHeight(n)
	edges := 0
	interior := make([]bool, n)
	for r, nd := range nodes {
		if nd.parent < 0 {
			if r != wantRoot {
				t.Errorf("tree %d: rank %d has no parent; the root is %d", tr, r, wantRoot)
			}
			if nd.depth != 0 || nd.height != H {
				t.Errorf("tree %d: root %d has depth %d and height %d, want 0 and %d", tr, r, nd.depth, nd.height, H)
			}
		} else {
			if r == wantRoot {
				t.Errorf("tree %d: root %d has parent %d", tr, r, nd.parent)
			}
			if nd.parent >= n || nd.parent == r {
				t.Fatalf("tree %d: rank %d has parent %d", tr, r, nd.parent)
			}
			pn := nodes[nd.parent]
			found := 0
			for i := range pn.nchild {
				if pn.children[i] == r {
					found++
				}
			}
			if found != 1 {
				t.Errorf("tree %d: rank %d has parent %d, which lists it %d times among its children %v",
					tr, r, nd.parent, found, pn.children[:pn.nchild])
			}
			if nd.depth != pn.depth+1 {
				t.Errorf("tree %d: rank %d at depth %d under %d at depth %d", tr, r, nd.depth, nd.parent, pn.depth)
			}
			if nd.height >= pn.height {
				// A parent sends up only after its children: the message
				// order needs its hop to be later.
				t.Errorf("tree %d: rank %d has height %d, not below its parent %d's %d", tr, r, nd.height, nd.parent, pn.height)
			}
		}
		if nd.nchild > 2 || nd.nchild < 0 {
			t.Fatalf("tree %d: rank %d has %d children", tr, r, nd.nchild)
		}
		interior[r] = nd.nchild > 0
		if (nd.height == 0) == interior[r] {
			t.Errorf("tree %d: rank %d has height %d and %d children", tr, r, nd.height, nd.nchild)
		}
		for i := range nd.nchild {
			c := nd.children[i]
			if c < 0 || c >= n || c == r {
				t.Fatalf("tree %d: rank %d has child %d", tr, r, c)
			}
			if nodes[c].parent != r {
				t.Errorf("tree %d: rank %d lists child %d, whose parent is %d", tr, r, c, nodes[c].parent)
			}
			if nd.heights[i] != nodes[c].height {
				t.Errorf("tree %d: rank %d records height %d for child %d, which has %d", tr, r, nd.heights[i], c, nodes[c].height)
			}
			edges++
		}
		if nd.nchild == 2 {
			h0, h1, c0, c1 := nd.heights[0], nd.heights[1], nd.children[0], nd.children[1]
			if c0 == c1 || h0 > h1 || h0 == h1 && c0 > c1 {
				t.Errorf("tree %d: rank %d: children %v with heights %v not in receive order", tr, r, nd.children, nd.heights)
			}
		}
		for i := nd.nchild; i < 2; i++ {
			if nd.children[i] != -1 {
				t.Errorf("tree %d: rank %d: unused child slot %d holds %d", tr, r, i, nd.children[i])
			}
		}
		if nd.depth > H {
			t.Errorf("tree %d: rank %d at depth %d, deeper than the height %d", tr, r, nd.depth, H)
		}
	}
	if edges != n-1 {
		t.Errorf("tree %d: %d parent-child edges, want %d", tr, edges, n-1)
	}
	// Connected and acyclic: every rank reaches the root within n steps.
	for r := range n {
		u, steps := r, 0
		for nodes[u].parent >= 0 && steps <= n {
			u = nodes[u].parent
			steps++
		}
		if u != wantRoot {
			t.Errorf("tree %d: rank %d does not reach the root (stopped at %d after %d steps)", tr, r, u, steps)
		}
	}
	return interior
}

// The trees shown in the package doc.
func TestConstructionDiagram(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want [2]map[int][]int // children by rank
	}{
		{8, [2]map[int][]int{
			{0: {4}, 4: {2, 6}, 2: {1, 3}, 6: {5, 7}},
			{7: {3}, 3: {1, 5}, 5: {4, 6}, 1: {0, 2}},
		}},
		{5, [2]map[int][]int{
			{0: {4}, 4: {2}, 2: {1, 3}},
			{1: {0}, 0: {3}, 3: {2, 4}},
		}},
	} {
		for tr := range 2 {
			for r := range tc.n {
				nd := place(tc.n, tr, r)
				got := map[int]bool{}
				for i := range nd.nchild {
					got[nd.children[i]] = true
				}
				ok := len(got) == len(tc.want[tr][r])
				for _, c := range tc.want[tr][r] {
					ok = ok && got[c]
				}
				if !ok {
					t.Errorf("n=%d tree %d rank %d: children %v, want %v", tc.n, tr, r, nd.children[:nd.nchild], tc.want[tr][r])
				}
			}
		}
	}
}

// TestLinkOrder checks, for every pair of ranks and both directions, that
// the sender and the receiver agree on the order of the messages between
// them, for halves of equal and unequal segment counts.
func TestLinkOrder(t *testing.T) {
	for n := 2; n <= 33; n++ {
		for _, count := range []int{1, 2, 5, 6} {
			plans := make([]plan, n)
			for r := range n {
				plans[r] = newPlan(n, r, 1, count, 1)
			}
			for a := range n {
				for b := range n {
					if a == b {
						continue
					}
					sent := linkMessages(t, &plans[a], b, true)
					got := linkMessages(t, &plans[b], a, false)
					if fmt.Sprint(sent) != fmt.Sprint(got) {
						t.Errorf("n=%d count=%d link %d->%d: sender's order %v, receiver's %v", n, count, a, b, sent, got)
					}
				}
			}
		}
	}
}

// linkMessages lists the steps this rank sends to (out) or receives from
// peer, in the order the one-goroutine path does them, and checks that the
// pipelined path's gates give the same order.
func linkMessages(t *testing.T, p *plan, peer int, out bool) []uint32 {
	t.Helper()
	all, nops := p.ops()
	ops := all[:nops]
	var seq []uint32
	for k := range p.maxSegs() {
		for _, o := range ops {
			if o.peer == peer && o.recv != out && k < p.halves[o.tree].segs {
				seq = append(seq, step(o.tree, o.phase, k))
			}
		}
	}
	x := &run{p: *p}
	x.connectGates()
	var byTicket []uint32
	var tickets []int64
	for _, o := range ops {
		if o.peer != peer || o.recv == out {
			continue
		}
		g := x.gateOf(o)
		for k := range p.halves[o.tree].segs {
			tk := int64(k)
			if g != nil {
				tk = g.ticket(o.tree, k)
			}
			tickets = append(tickets, tk)
			byTicket = append(byTicket, step(o.tree, o.phase, k))
		}
	}
	for i := 1; i < len(tickets); i++ {
		for j := i; j > 0 && tickets[j] < tickets[j-1]; j-- {
			tickets[j], tickets[j-1] = tickets[j-1], tickets[j]
			byTicket[j], byTicket[j-1] = byTicket[j-1], byTicket[j]
		}
	}
	if fmt.Sprint(byTicket) != fmt.Sprint(seq) {
		t.Errorf("n=%d rank %d, peer %d, out %v: the gates order the messages %v, the one-goroutine path %v",
			p.n, p.r, peer, out, byTicket, seq)
	}
	return seq
}

func (x *run) gateOf(o op) *gate {
	hf := &x.p.halves[o.tree]
	switch {
	case o.peer == hf.parent && o.recv:
		return x.fromParent[o.tree]
	case o.peer == hf.parent:
		return x.toParent[o.tree]
	case o.recv:
		return x.fromChild[o.tree][o.child]
	default:
		return x.toChild[o.tree][o.child]
	}
}

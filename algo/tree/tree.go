package tree

import "math/bits"

// node is one rank's place in one of the two trees.
type node struct {
	parent int // -1 at the root
	// children in the order their reduce messages are received: by the hop
	// at which they leave (their height), then by rank.
	children [2]int
	nchild   int
	height   int    // 0 at a leaf; the hop at which the rank sends to its parent
	heights  [2]int // height of each child
	depth    int    // 0 at the root
}

// treeHeight is the height of the root of both trees of n ranks: the number
// of hops from the deepest leaf to the root.
func treeHeight(n int) int { return bits.Len(uint(n - 1)) }

// shape0 returns the parent and children (-1 where absent) of rank v in tree
// 0 of n ranks, the in-order binary tree over the ranks:
//
//   - Rank 0 is the root. Its only child is the largest power of two below n.
//   - A rank v > 0 whose lowest set bit is b sits at height log2(b). Its
//     children are v-b/2 and the first of v+b/2, v+b/4, ..., v+1 below n (the
//     right subtree is cut off at n, so its top may be missing).
//   - Its parent is v+b when bit 2b of v is clear and v+b < n, and v-b
//     otherwise.
//
// The odd ranks are the leaves; the even ranks are interior.
func shape0(n, v int) (parent int, children [2]int) {
	children = [2]int{-1, -1}
	if v == 0 {
		if n > 1 {
			children[0] = 1 << (treeHeight(n) - 1)
		}
		return -1, children
	}
	b := v & -v
	parent = v + b
	if v&(2*b) != 0 || parent >= n {
		parent = v - b
	}
	if b > 1 {
		children[0] = v - b/2
		for d := b / 2; d >= 1; d /= 2 {
			if v+d < n {
				children[1] = v + d
				break
			}
		}
	}
	return parent, children
}

// height0 is the height of rank v in tree 0. The left subtree of every
// rank v > 0 is complete, so its height is that of the full in-order tree.
func height0(n, v int) int {
	if v == 0 {
		return treeHeight(n)
	}
	return bits.TrailingZeros(uint(v))
}

// role is the rank of tree 0 whose place rank r takes in tree tr: tree 1 is
// tree 0 mirrored for even n and shifted by one for odd n.
func role(n, tr, r int) int {
	switch {
	case tr == 0 || n == 1:
		return r
	case n%2 == 0:
		return n - 1 - r
	default:
		return (r - 1 + n) % n
	}
}

// holder is the inverse of role: the rank that takes tree 0's place v in
// tree tr.
func holder(n, tr, v int) int {
	switch {
	case v < 0 || tr == 0 || n == 1:
		return v
	case n%2 == 0:
		return n - 1 - v
	default:
		return (v + 1) % n
	}
}

// place returns rank r's node in tree tr (0 or 1) of the double binary tree
// over n ranks.
func place(n, tr, r int) node {
	v := role(n, tr, r)
	p, cs := shape0(n, v)
	nd := node{parent: holder(n, tr, p), children: [2]int{-1, -1}, height: height0(n, v)}
	for _, c := range cs {
		if c < 0 {
			continue
		}
		nd.children[nd.nchild] = holder(n, tr, c)
		nd.heights[nd.nchild] = height0(n, c)
		nd.nchild++
	}
	if nd.nchild == 2 && (nd.heights[1] < nd.heights[0] ||
		nd.heights[1] == nd.heights[0] && nd.children[1] < nd.children[0]) {
		nd.children[0], nd.children[1] = nd.children[1], nd.children[0]
		nd.heights[0], nd.heights[1] = nd.heights[1], nd.heights[0]
	}
	for u := v; u != 0; u, _ = shape0(n, u) {
		nd.depth++
	}
	return nd
}

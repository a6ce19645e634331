package stream

// Copy copies min(len(dst), len(src)) bytes from src to dst, like copy,
// and returns how many. The bulk goes through streaming stores where the
// platform has them (amd64), the unaligned ends through copy. dst and src
// must not overlap. Copy returns once the stores are visible to other
// cores, so a flag stored after it orders after the data.
func Copy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n == 0 {
		return 0
	}
	dst, src = dst[:n], src[:n]
	head := headBytes(dst)
	if !available || n-head < lineBytes {
		return copy(dst, src)
	}
	copy(dst[:head], src[:head])
	body := (n - head) &^ (lineBytes - 1)
	streamLines(&dst[head], &src[head], body)
	copy(dst[head+body:], src[head+body:])
	return n
}

// Available reports whether Copy streams on this platform; where it does
// not, Copy is copy.
func Available() bool { return available }

// lineBytes is what the assembly loop writes per iteration: one cache line.
const lineBytes = 64

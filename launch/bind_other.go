//go:build !linux

package launch

// BindCore binds nothing off Linux: it returns -1 and nil, as for a
// process an outer launcher already bound.
func BindCore(localRank int) (cpu int, err error) { return -1, nil }

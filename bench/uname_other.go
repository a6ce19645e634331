//go:build !unix

package bench

// kernel is unknown where there is no uname.
func kernel() string { return "" }

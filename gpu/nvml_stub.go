//go:build !(nvml && cgo && linux)

package gpu

import "fmt"

// Discover needs NVML through cgo, which the default build leaves out (the
// C headers of go-nvml also flood a first build with compiler warnings).
func Discover() (*Topology, error) {
	return nil, fmt.Errorf("%w: built without NVML support: rebuild with -tags nvml (needs cgo; the NVIDIA driver provides libnvidia-ml.so at run time)", ErrNoDriver)
}

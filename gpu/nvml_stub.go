//go:build !(cgo && linux)

package gpu

import "fmt"

// Discover needs NVML through cgo; this build has none.
func Discover() (*Topology, error) {
	return nil, fmt.Errorf("%w: this collbench was built without cgo, and NVML (github.com/NVIDIA/go-nvml) needs it; rebuild with CGO_ENABLED=1", ErrNoDriver)
}

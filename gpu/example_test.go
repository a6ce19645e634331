package gpu_test

import (
	"os"

	"github.com/collkit/collkit/gpu"
)

// Describe prints this host's GPUs and topology, or "no NVIDIA driver: ..."
// (No Output: it depends on the machine.)
func ExampleDescribe() {
	gpu.Describe(os.Stdout)
}

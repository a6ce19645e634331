package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"slices"
	"syscall"

	"github.com/collkit/collkit/launch"
)

// reportKilled names the ranks that died by a signal: they cannot say so
// themselves, and the survivors' stall reports point at them.
func reportKilled(w io.Writer, re *launch.RankError) {
	for _, r := range slices.Sorted(maps.Keys(re.Failed)) {
		var ee *exec.ExitError
		if !errors.As(re.Failed[r], &ee) {
			continue
		}
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			fmt.Fprintf(w, "collbench: rank %d was killed by signal %v\n", r, ws.Signal())
		}
	}
}

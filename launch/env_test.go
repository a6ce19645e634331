package launch

import (
	"slices"
	"testing"
)

// Launcher and collkit variables go; everything else stays, in order.
func TestWithoutLauncherEnv(t *testing.T) {
	in := []string{"HOME=/root", "RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=h",
		"MASTER_PORT=1", "OMPI_COMM_WORLD_RANK=1", "PMI_RANK=1", "SLURM_PROCID=1", "COLLKIT_SECRET=x", "PATH=/bin", "RANKS=9"}
	if got, want := WithoutLauncherEnv(in), []string{"HOME=/root", "PATH=/bin", "RANKS=9"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

package bootstrap

import (
	"errors"
	"strings"
	"testing"
)

func getenv(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestFromEnv(t *testing.T) {
	defaults := func(e Env) Env {
		if e.MasterAddr == "" {
			e.MasterAddr = DefaultMasterAddr
		}
		if e.MasterPort == 0 {
			e.MasterPort = DefaultMasterPort
		}
		if e.JobID == "" {
			e.JobID = "default"
		}
		return e
	}
	cases := []struct {
		name string
		vars map[string]string
		want Env
	}{
		{"pytorch", map[string]string{"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
			"MASTER_ADDR": "node1", "MASTER_PORT": "1234"},
			Env{Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2, MasterAddr: "node1", MasterPort: 1234, Source: "pytorch"}},
		{"collkit launcher", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
			"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "40000", "COLLKIT_STORE_EXTERNAL": "1", "COLLKIT_JOB_ID": "ab12"},
			Env{Rank: 0, Size: 1, LocalSize: 1, MasterPort: 40000, JobID: "ab12", JobIDVar: "COLLKIT_JOB_ID", Source: "pytorch", StoreExternal: true}},
		{"torchrun run id", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "run7"},
			Env{Rank: 1, Size: 2, JobID: "run7", JobIDVar: "TORCHELASTIC_RUN_ID", Source: "pytorch"}},
		{"torchrun default run id is no job id", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "none"},
			Env{Rank: 1, Size: 2, Source: "pytorch"}},
		{"torchrun inside slurm", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "none",
			"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "3"},
			Env{Rank: 1, Size: 2, JobID: "4242", JobIDVar: "SLURM_JOB_ID", Source: "pytorch"}},
		{"pytorch wins over openmpi", map[string]string{"RANK": "1", "WORLD_SIZE": "2",
			"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "8"},
			Env{Rank: 1, Size: 2, Source: "pytorch"}},
		{"ipv6 master", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "[fe80::1]"},
			Env{Rank: 0, Size: 2, MasterAddr: "fe80::1", Source: "pytorch"}},
		{"openmpi", map[string]string{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8",
			"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
			"OMPI_MCA_ess_base_jobid": "123456", "PMIX_NAMESPACE": "prterun-x-1"},
			Env{Rank: 3, Size: 8, LocalRank: 1, LocalSize: 2, JobID: "123456", JobIDVar: "OMPI_MCA_ess_base_jobid", Source: "openmpi"}},
		{"openmpi 3 job id", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
			"OMPI_MCA_orte_ess_jobid": "999"},
			Env{Rank: 0, Size: 2, JobID: "999", JobIDVar: "OMPI_MCA_orte_ess_jobid", Source: "openmpi"}},
		{"openmpi 5 pmix namespace", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
			"PMIX_NAMESPACE": "prterun-host-4242@1"},
			Env{Rank: 0, Size: 2, JobID: "prterun-host-4242@1", JobIDVar: "PMIX_NAMESPACE", Source: "openmpi"}},
		{"job id override", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
			"OMPI_MCA_ess_base_jobid": "1", "COLLKIT_JOB_ID": "mine"},
			Env{Rank: 0, Size: 2, JobID: "mine", JobIDVar: "COLLKIT_JOB_ID", Source: "openmpi"}},
		{"slurm", map[string]string{"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "2",
			"SLURM_NTASKS_PER_NODE": "3", "SLURM_JOB_ID": "777", "SLURM_STEP_ID": "0",
			"MASTER_ADDR": "10.1.2.3"},
			Env{Rank: 5, Size: 6, LocalRank: 2, LocalSize: 3, MasterAddr: "10.1.2.3", JobID: "777.0", JobIDVar: "SLURM_JOB_ID.SLURM_STEP_ID", Source: "slurm"}},
		{"old slurm names", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_JOBID": "77", "SLURM_STEPID": "1"},
			Env{Rank: 0, Size: 2, JobID: "77.1", JobIDVar: "SLURM_JOBID.SLURM_STEPID", Source: "slurm"}},
		{"slurm uneven tasks per node", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "5",
			"SLURM_LOCALID": "0", "SLURM_NTASKS_PER_NODE": "2(x2),1", "SLURM_JOB_ID": "8"},
			Env{Rank: 0, Size: 5, JobID: "8", JobIDVar: "SLURM_JOB_ID", Source: "slurm"}},
		{"pmi", map[string]string{"PMI_RANK": "1", "PMI_SIZE": "3", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "3"},
			Env{Rank: 1, Size: 3, LocalRank: 1, LocalSize: 3, Source: "pmi"}},
		{"pmi-2 job id", map[string]string{"PMI_RANK": "1", "PMI_SIZE": "3", "PMI_JOBID": "55_0"},
			Env{Rank: 1, Size: 3, JobID: "55_0", JobIDVar: "PMI_JOBID", Source: "pmi"}},
		{"store external off", map[string]string{"PMI_RANK": "0", "PMI_SIZE": "1", "COLLKIT_STORE_EXTERNAL": "0"},
			Env{Rank: 0, Size: 1, Source: "pmi"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := FromEnv(getenv(c.vars))
			if err != nil {
				t.Fatal(err)
			}
			if want := defaults(c.want); got != want {
				t.Fatalf("FromEnv =\n %+v\nwant\n %+v", got, want)
			}
		})
	}
}

func TestFromEnvErrors(t *testing.T) {
	cases := []struct {
		name    string
		vars    map[string]string
		wantVar string // the variable the error must name
		say     string // and something it must say
	}{
		{"bad rank", map[string]string{"RANK": "abc", "WORLD_SIZE": "2"}, "RANK", "whole number"},
		{"negative rank", map[string]string{"RANK": "-1", "WORLD_SIZE": "2"}, "RANK", "at least 0"},
		{"rank too big", map[string]string{"RANK": "2", "WORLD_SIZE": "2"}, "RANK", "from 0 to 1"},
		{"no world size", map[string]string{"RANK": "0"}, "WORLD_SIZE", "not set"},
		{"zero world size", map[string]string{"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE", "at least 1"},
		{"bad port", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "http"}, "MASTER_PORT", "port"},
		{"port too big", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "70000"}, "MASTER_PORT", "65535"},
		{"port zero", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "0"}, "MASTER_PORT", "at least 1"},
		{"host:port in MASTER_ADDR", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "node1:29500"},
			"MASTER_ADDR", "MASTER_PORT"},
		{"local rank too big", map[string]string{"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"},
			"LOCAL_RANK", "below LOCAL_WORLD_SIZE"},
		{"bad local size", map[string]string{"RANK": "0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "x"},
			"LOCAL_WORLD_SIZE", "whole number"},
		{"openmpi rank too big", map[string]string{"OMPI_COMM_WORLD_RANK": "8", "OMPI_COMM_WORLD_SIZE": "8"},
			"OMPI_COMM_WORLD_RANK", "below OMPI_COMM_WORLD_SIZE=8"},
		{"slurm no ntasks", map[string]string{"SLURM_PROCID": "0"}, "SLURM_NTASKS", "not set"},
		{"pmi bad size", map[string]string{"PMI_RANK": "0", "PMI_SIZE": "many"}, "PMI_SIZE", "whole number"},
		{"bad external flag", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "COLLKIT_STORE_EXTERNAL": "maybe"},
			"COLLKIT_STORE_EXTERNAL", "launcher"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := FromEnv(getenv(c.vars))
			var ee *EnvError
			if !errors.As(err, &ee) {
				t.Fatalf("FromEnv = %v, want an *EnvError", err)
			}
			if ee.Var != c.wantVar || ee.Value != c.vars[c.wantVar] {
				t.Errorf("error names %s=%q, want %s=%q", ee.Var, ee.Value, c.wantVar, c.vars[c.wantVar])
			}
			msg := err.Error()
			if !strings.Contains(msg, c.wantVar) || !strings.Contains(msg, c.vars[c.wantVar]) || !strings.Contains(msg, c.say) {
				t.Errorf("error %q should name %s, its value %q and say %q", msg, c.wantVar, c.vars[c.wantVar], c.say)
			}
		})
	}
}

func TestFromEnvNothingSet(t *testing.T) {
	// MASTER_* alone do not make a job.
	_, err := FromEnv(getenv(map[string]string{"MASTER_ADDR": "x", "LOCAL_RANK": "0"}))
	if !errors.Is(err, ErrNoEnv) {
		t.Fatalf("FromEnv with no rank variables = %v, want ErrNoEnv", err)
	}
	if !strings.Contains(err.Error(), "RANK") || !strings.Contains(err.Error(), "launcher") {
		t.Errorf("error %q does not say what to do", err)
	}
}

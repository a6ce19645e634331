package bootstrap

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Defaults for the store address when the environment does not name one.
const (
	DefaultMasterAddr = "127.0.0.1"
	DefaultMasterPort = 29500
)

// ErrNoEnv is wrapped by FromEnv when no launcher variables are set at all:
// the program was started by hand, not by a launcher.
var ErrNoEnv = errors.New("bootstrap: no rank variables in the environment")

// Env is what a process learns from its launcher: who it is and where the
// job's store is.
type Env struct {
	Rank, Size int // this process's rank in [0, Size)
	// LocalRank is the rank among the processes on this host; LocalSize is
	// their number, 0 when the launcher does not say (LocalRank is then 0
	// unless the launcher set it).
	LocalRank, LocalSize int
	MasterAddr           string // host of the store; DefaultMasterAddr if unset
	MasterPort           int    // port of the store; DefaultMasterPort if unset
	JobID                string // the same on every rank of one job; "default" if nothing names one
	Source               string // which variables it came from: "pytorch", "openmpi", "slurm" or "pmi"
	// JobIDVar names the variable JobID came from (COLLKIT_JOB_ID,
	// TORCHELASTIC_RUN_ID, SLURM_JOB_ID.SLURM_STEP_ID, ...), for messages
	// that say why two ranks' job ids differ. Empty when JobID is "default".
	JobIDVar string
	// Secret is the job secret from COLLKIT_SECRET: the store and the tcp
	// transport make every connection prove it (HMAC challenge-response).
	// Empty when unset: connections are then checked only for job id, rank and
	// world size, and any process that can reach the ports may join.
	Secret string
	// StoreExternal means a store server already runs at MasterAddr:MasterPort
	// (a launcher hosts it), so rank 0 must not start one.
	StoreExternal bool
	// Store is COLLKIT_STORE: the URL of a store outside the job, such as
	// etcd://10.0.0.5:2379/myjob, through which the ranks meet instead of
	// the TCP store at MasterAddr:MasterPort (see RegisterStoreScheme).
	// Empty means that TCP store.
	Store string
}

// StoreAddr is MasterAddr:MasterPort as a "host:port" string.
func (e Env) StoreAddr() string {
	return net.JoinHostPort(e.MasterAddr, strconv.Itoa(e.MasterPort))
}

// EnvError reports an environment variable with a value FromEnv cannot use.
type EnvError struct {
	Var, Value string
	Problem    string // what is wrong and what to do
}

func (e *EnvError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("bootstrap: %s is not set: %s", e.Var, e.Problem)
	}
	return fmt.Sprintf("bootstrap: %s=%q: %s", e.Var, e.Value, e.Problem)
}

// envSource names the variables one kind of launcher sets.
type envSource struct {
	name                             string
	rank, size, localRank, localSize string
	// lenientLocalSize: the local size variable may hold something other
	// than a number (Slurm's "2(x3)"), which means unknown rather than wrong.
	lenientLocalSize bool
	// jobID returns the launcher's own id of the job and the variables it
	// came from, or "" when the launcher set none.
	jobID func(getenv func(string) string) (id, from string)
}

// sources in the order FromEnv tries them. Their job ids are what each
// launcher sets on every process of one job and differently for another:
//
//   - torchrun: TORCHELASTIC_RUN_ID is --rdzv-id, whose default "none" is the
//     same for every job, so "none" counts as unset; torchrun inside a Slurm
//     allocation then falls back to SLURM_JOB_ID (not the step: one srun per
//     node gives the nodes different steps).
//   - Open MPI: OMPI_MCA_ess_base_jobid (Open MPI 2 to 4, ORTE),
//     OMPI_MCA_orte_ess_jobid (1.x), PMIX_NAMESPACE (Open MPI 5 under PRRTE,
//     and srun --mpi=pmix).
//   - srun: SLURM_JOB_ID.SLURM_STEP_ID (SLURM_JOBID, SLURM_STEPID in older
//     releases): two steps of one allocation are two jobs.
//   - PMI launchers: PMIX_NAMESPACE, else PMI_JOBID (Slurm's PMI-2, Cray PALS).
var sources = []envSource{
	{name: "pytorch", rank: "RANK", size: "WORLD_SIZE", localRank: "LOCAL_RANK", localSize: "LOCAL_WORLD_SIZE",
		jobID: func(g func(string) string) (string, string) {
			if id := g("TORCHELASTIC_RUN_ID"); id != "" && id != "none" {
				return id, "TORCHELASTIC_RUN_ID"
			}
			return firstSet(g, "SLURM_JOB_ID", "SLURM_JOBID")
		}},
	{name: "openmpi", rank: "OMPI_COMM_WORLD_RANK", size: "OMPI_COMM_WORLD_SIZE",
		localRank: "OMPI_COMM_WORLD_LOCAL_RANK", localSize: "OMPI_COMM_WORLD_LOCAL_SIZE",
		jobID: func(g func(string) string) (string, string) {
			return firstSet(g, "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE")
		}},
	{name: "slurm", rank: "SLURM_PROCID", size: "SLURM_NTASKS", localRank: "SLURM_LOCALID",
		localSize: "SLURM_NTASKS_PER_NODE", lenientLocalSize: true,
		jobID: func(g func(string) string) (string, string) {
			job, jobVar := firstSet(g, "SLURM_JOB_ID", "SLURM_JOBID")
			if job == "" {
				return "", ""
			}
			if step, stepVar := firstSet(g, "SLURM_STEP_ID", "SLURM_STEPID"); step != "" {
				return job + "." + step, jobVar + "." + stepVar
			}
			return job, jobVar
		}},
	{name: "pmi", rank: "PMI_RANK", size: "PMI_SIZE", localRank: "MPI_LOCALRANKID", localSize: "MPI_LOCALNRANKS",
		jobID: func(g func(string) string) (string, string) { return firstSet(g, "PMIX_NAMESPACE", "PMI_JOBID") }},
}

// firstSet returns the value of the first of names that is set, and its name.
func firstSet(getenv func(string) string, names ...string) (value, name string) {
	for _, n := range names {
		if v := getenv(n); v != "" {
			return v, n
		}
	}
	return "", ""
}

// sizeVar is the variable that holds the world size for launcher source
// (Env.Source), or "" for an Env that did not come from FromEnv.
func sizeVar(source string) string {
	for _, s := range sources {
		if s.name == source {
			return s.size
		}
	}
	return ""
}

// FromEnv reads the rank, world size and store address that a launcher put
// in the environment; pass os.Getenv. It understands, in this order,
// PyTorch-style variables (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// as torchrun and collkit's own launcher set them), Open MPI
// (OMPI_COMM_WORLD_*), Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID) and
// PMI (PMI_RANK, PMI_SIZE). MASTER_ADDR and MASTER_PORT name the store with
// any of them and default to 127.0.0.1:29500. COLLKIT_JOB_ID names the job,
// else the launcher's own job id is used (see sources), else "default".
// The store and every tcp connection check it, so that two jobs that meet
// on one MASTER_PORT are kept apart.
// COLLKIT_STORE_EXTERNAL=1 says a launcher already hosts the store.
// COLLKIT_STORE=etcd://host:port[,host:port...]/prefix makes the ranks meet
// in etcd under prefix instead (one job per prefix; without one,
// collkit/<job id>/), so that the job's store lives outside every rank; the
// program must import bootstrap/etcdstore (collbench does), and
// MASTER_ADDR and MASTER_PORT then do not matter to the store.
// COLLKIT_SECRET is the job secret (see Env.Secret).
//
// With no rank variables at all FromEnv returns an error wrapping ErrNoEnv;
// a variable with a bad value gives an *EnvError naming it.
func FromEnv(getenv func(string) string) (Env, error) {
	var src *envSource
	for i := range sources {
		if getenv(sources[i].rank) != "" {
			src = &sources[i]
			break
		}
	}
	if src == nil {
		return Env{}, fmt.Errorf("%w: set RANK and WORLD_SIZE (and MASTER_ADDR, MASTER_PORT for more than one host), "+
			"or start the program through a launcher: collkit's launch package, torchrun, mpirun or srun", ErrNoEnv)
	}
	env := Env{Source: src.name}
	var err error
	if env.Size, err = intVar(getenv, src.size, 1, "set it to the number of ranks in the job"); err != nil {
		return Env{}, err
	}
	if env.Rank, err = intVar(getenv, src.rank, 0, "set it to this process's rank"); err != nil {
		return Env{}, err
	}
	if env.Rank >= env.Size {
		return Env{}, &EnvError{Var: src.rank, Value: getenv(src.rank), Problem: fmt.Sprintf(
			"rank must be below %s=%d: ranks run from 0 to %d; check that every process got its own rank",
			src.size, env.Size, env.Size-1)}
	}
	if getenv(src.localSize) != "" {
		env.LocalSize, err = intVar(getenv, src.localSize, 1, "set it to the number of ranks on this host")
		if err != nil {
			if !src.lenientLocalSize {
				return Env{}, err
			}
			env.LocalSize = 0
		}
	}
	if getenv(src.localRank) != "" {
		if env.LocalRank, err = intVar(getenv, src.localRank, 0, "set it to this process's rank on its host"); err != nil {
			return Env{}, err
		}
		if env.LocalSize > 0 && env.LocalRank >= env.LocalSize {
			return Env{}, &EnvError{Var: src.localRank, Value: getenv(src.localRank), Problem: fmt.Sprintf(
				"local rank must be below %s=%d; check the launcher's per-host settings", src.localSize, env.LocalSize)}
		}
	}

	env.MasterAddr = DefaultMasterAddr
	if a := getenv("MASTER_ADDR"); a != "" {
		a = strings.TrimSuffix(strings.TrimPrefix(a, "["), "]")
		if strings.Contains(a, ":") && net.ParseIP(a) == nil {
			return Env{}, &EnvError{Var: "MASTER_ADDR", Value: getenv("MASTER_ADDR"),
				Problem: "want a host name or IP address; put the port in MASTER_PORT"}
		}
		env.MasterAddr = a
	}
	env.MasterPort = DefaultMasterPort
	if getenv("MASTER_PORT") != "" {
		if env.MasterPort, err = intVar(getenv, "MASTER_PORT", 1, "set it to a free TCP port for the store, 1 to 65535"); err != nil {
			return Env{}, err
		}
		if env.MasterPort > 65535 {
			return Env{}, &EnvError{Var: "MASTER_PORT", Value: getenv("MASTER_PORT"),
				Problem: "not a TCP port: set it to a free port for the store, 1 to 65535"}
		}
	}

	env.JobID, env.JobIDVar = firstSet(getenv, "COLLKIT_JOB_ID")
	if env.JobID == "" {
		env.JobID, env.JobIDVar = src.jobID(getenv)
	}
	if env.JobID == "" {
		env.JobID = "default"
	}
	if v := getenv("COLLKIT_SECRET"); v != "" {
		if len(v) < MinSecretLen {
			return Env{}, &EnvError{Var: "COLLKIT_SECRET", Value: "(hidden)", Problem: fmt.Sprintf(
				"%d bytes is too short to be a secret: use at least %d random characters, e.g. $(openssl rand -hex 16), the same on every rank",
				len(v), MinSecretLen)}
		}
		env.Secret = v
	}
	if v := getenv("COLLKIT_STORE_EXTERNAL"); v != "" {
		if env.StoreExternal, err = strconv.ParseBool(v); err != nil {
			return Env{}, &EnvError{Var: "COLLKIT_STORE_EXTERNAL", Value: v,
				Problem: "want 1 when a launcher hosts the store at MASTER_ADDR:MASTER_PORT, or 0"}
		}
	}
	if v := getenv("COLLKIT_STORE"); v != "" {
		if _, err := ParseStoreURL(v); err != nil {
			return Env{}, &EnvError{Var: "COLLKIT_STORE", Value: v, Problem: err.Error()}
		}
		env.Store = v
	}
	return env, nil
}

// intVar parses the variable name as an integer of at least lo.
func intVar(getenv func(string) string, name string, lo int, fix string) (int, error) {
	v := getenv(name)
	if v == "" {
		return 0, &EnvError{Var: name, Problem: fix}
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, &EnvError{Var: name, Value: v, Problem: "not a whole number: " + fix}
	}
	if n < lo {
		return 0, &EnvError{Var: name, Value: v, Problem: fmt.Sprintf("must be at least %d: %s", lo, fix)}
	}
	return n, nil
}

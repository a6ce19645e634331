package nccl

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/collkit/collkit/bootstrap"
	"github.com/collkit/collkit/reduce"
)

func fakeEnv(vars map[string]string, files ...string) searchEnv {
	return searchEnv{
		getenv: func(k string) string { return vars[k] },
		glob: func(p string) ([]string, error) {
			var out []string
			for _, f := range files {
				for d := f; d != "/" && d != "."; d = filepath.Dir(d) {
					if ok, _ := filepath.Match(p, d); ok && !slices.Contains(out, d) {
						out = append(out, d)
					}
				}
			}
			return out, nil
		},
		exists: func(p string) bool { return slices.Contains(files, p) },
	}
}

func TestCandidatesOverride(t *testing.T) {
	e := fakeEnv(map[string]string{EnvNCCLLib: "/opt/x/libnccl.so.2"}, "/usr/local/cuda/lib64/libnccl.so.2")
	if got := e.candidates(ncclLibrary); !slices.Equal(got, []string{"/opt/x/libnccl.so.2"}) {
		t.Errorf("with %s set: %v, want only that path", EnvNCCLLib, got)
	}
}

func TestCandidatesPipLayouts(t *testing.T) {
	venvNCCL := "/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"
	userNCCL := "/home/u/.local/lib/python3.10/site-packages/nvidia/nccl/lib/libnccl.so.2"
	driver := "/usr/lib/x86_64-linux-gnu/libcuda.so.1"
	e := fakeEnv(map[string]string{"VIRTUAL_ENV": "/venv", "HOME": "/home/u"}, venvNCCL, userNCCL, driver)
	got := e.candidates(ncclLibrary)
	want := []string{"libnccl.so.2", "libnccl.so", venvNCCL, userNCCL}
	if !slices.Equal(got, want) {
		t.Errorf("nccl candidates %v, want %v", got, want)
	}
	got = e.candidates(cudaLibrary)
	want = []string{"libcuda.so.1", "libcuda.so", driver}
	if !slices.Equal(got, want) {
		t.Errorf("driver candidates %v, want %v", got, want)
	}
}

func TestNotFoundMessage(t *testing.T) {
	e := fakeEnv(map[string]string{"VIRTUAL_ENV": "/venv"}, "/venv/lib/python3.12/site-packages/numpy/x")
	err := e.notFound(ncclLibrary, e.candidates(ncclLibrary), make([]error, 2))
	if !errors.Is(err, ErrNotAvailable) {
		t.Fatalf("%v does not wrap ErrNotAvailable", err)
	}
	for _, want := range []string{"nccl: NCCL not available: libnccl.so.2 not found (searched: ",
		"/venv/lib/python3.12/site-packages/nvidia/nccl/lib", "pip install nvidia-nccl-cu13", "/venv/lib/python3.12/site-packages/nvidia/cu13/lib", EnvNCCLLib} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestLoadMissing loads through the real dynamic loader with an override
// that points nowhere: a clear error, no panic.
func TestLoadMissing(t *testing.T) {
	e := fakeEnv(map[string]string{EnvNCCLLib: filepath.Join(t.TempDir(), "libnccl.so.2")})
	_, err := load(e)
	if !errors.Is(err, ErrNotAvailable) || !strings.Contains(err.Error(), EnvNCCLLib+"=") {
		t.Errorf("load with a missing override: %v", err)
	}
}

// TestNewWithoutNCCL checks the error users see on a machine without NCCL;
// on a machine with it, New must succeed.
func TestNewWithoutNCCL(t *testing.T) {
	_, err := New(Config{Rank: 0, Size: 1})
	if Available() == nil {
		if err != nil {
			t.Fatalf("NCCL loads but New failed: %v", err)
		}
		t.Skip("NCCL is installed here")
	}
	if !errors.Is(err, ErrNotAvailable) || !strings.Contains(err.Error(), "NCCL not available: ") {
		t.Errorf("New without NCCL: %v", err)
	}
}

func TestMappingTables(t *testing.T) {
	// The numbers of nccl.h's ncclDataType_t and ncclRedOp_t.
	wantT := map[reduce.DType]int32{reduce.Uint8: 1, reduce.Int32: 2, reduce.Int64: 4, reduce.Float16: 6,
		reduce.Float32: 7, reduce.Float64: 8, reduce.BFloat16: 9}
	for _, dt := range reduce.DTypes {
		got, err := ncclType(dt, 22105)
		if err != nil || got != wantT[dt] {
			t.Errorf("ncclType(%v) = %d, %v; want %d", dt, got, err, wantT[dt])
		}
	}
	wantO := map[reduce.Op]int32{reduce.Sum: 0, reduce.Prod: 1, reduce.Max: 2, reduce.Min: 3, reduce.Avg: 4}
	for _, op := range reduce.Ops {
		got, err := ncclOp(op, 22105)
		if err != nil || got != wantO[op] {
			t.Errorf("ncclOp(%v) = %d, %v; want %d", op, got, err, wantO[op])
		}
	}
	if _, err := ncclOp(reduce.Avg, 2708); !errors.Is(err, ErrUnsupported) {
		t.Errorf("avg on NCCL 2.7.8: %v, want ErrUnsupported", err)
	}
	if _, err := ncclType(reduce.BFloat16, 20906); !errors.Is(err, ErrUnsupported) {
		t.Errorf("bfloat16 on NCCL 2.9.6: %v, want ErrUnsupported", err)
	}
	if _, err := ncclType(reduce.DType(0), 22105); !errors.Is(err, ErrUnsupported) {
		t.Errorf("invalid dtype: %v, want ErrUnsupported", err)
	}
	for v, want := range map[int]string{22105: "2.21.5", 21803: "2.18.3", 2708: "2.7.8"} {
		if got := versionString(v); got != want {
			t.Errorf("versionString(%d) = %s, want %s", v, got, want)
		}
	}
	for _, c := range []struct {
		algo string
		v    int
		want string
	}{{"", 22105, ""}, {"ring", 22105, "Ring"}, {"ring", 22400, "allreduce:ring"}, {"tree", 22703, "allreduce:tree"}, {"tree", 23000, "allreduce:tree"}} {
		if got, err := algoEnv(c.algo, c.v); err != nil || got != c.want {
			t.Errorf("algoEnv(%q, %d) = %q, %v; want %q", c.algo, c.v, got, err, c.want)
		}
	}
	// Tree on an NCCL that sets it for every collective would break
	// broadcast, all-gather and reduce-scatter.
	if _, err := algoEnv("tree", 22105); err == nil || !strings.Contains(err.Error(), "needs NCCL 2.24 or newer, this is 2.21.5") {
		t.Errorf("tree on NCCL 2.21.5: %v", err)
	}
	if _, err := algoEnv("halvingdoubling", 22703); err == nil {
		t.Error("algoEnv accepted halvingdoubling")
	}
}

func TestConfigStructLayout(t *testing.T) {
	c := configure(false)
	// ncclConfig_t of NCCL 2.18 on LP64: size_t, 6 ints, a pointer, an int.
	if c.Size != 48 || c.Magic != 0xcafebeef || c.Version != 21800 || c.Blocking != 0 {
		t.Errorf("config %+v", c)
	}
	if b := configure(true); b.Blocking != 1 || b.Size != 48 {
		t.Errorf("blocking config %+v", b)
	}
}

func TestExchangeIDThroughStore(t *testing.T) {
	store := bootstrap.NewMemStore()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var want uniqueID
	for i := range want.Internal {
		want.Internal[i] = byte(i * 7)
	}
	const n = 5
	got := make([]uniqueID, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			got[r], errs[r] = exchangeID(ctx, store, "nccl/test/id", r, func() (uniqueID, error) {
				if r != 0 {
					t.Errorf("rank %d created an id", r)
				}
				return want, nil
			}, r == 0)
		})
	}
	wg.Wait()
	for r := range n {
		if errs[r] != nil || got[r] != want {
			t.Errorf("rank %d: err %v, id equal %v", r, errs[r], got[r] == want)
		}
	}
	// A key holding something else is a clear error.
	store.Set(ctx, "nccl/bad/id", []byte("short"))
	if _, err := exchangeID(ctx, store, "nccl/bad/id", 1, nil, false); err == nil || !strings.Contains(err.Error(), "has 5 bytes, want 128") {
		t.Errorf("short id: %v", err)
	}
	// A creator that never comes: the context bounds the wait.
	short, cancel2 := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel2()
	if _, err := exchangeID(short, store, "nccl/none/id", 1, nil, false); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("missing creator: %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, c := range []Config{{Rank: 0, Size: 0}, {Rank: 2, Size: 2}, {Rank: 0, Size: 1, LocalRank: -1}, {Rank: 0, Size: 1, Algo: "bogus"}} {
		if _, err := newWith(c, nil); err == nil || !strings.Contains(err.Error(), "invalid config") {
			t.Errorf("config %+v: %v", c, err)
		}
	}
}

// TestCandidatesWithoutVariables: the GPU machine's layout, a CUDA 13
// venv under /opt with no VIRTUAL_ENV, is found; so are the CUDA 13
// wheels' shared directory, the python3 on PATH's own site-packages, and
// a ./.venv.
func TestCandidatesWithoutVariables(t *testing.T) {
	torch := "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"
	cu13 := "/srv/py/lib/python3.13/site-packages/nvidia/cu13/lib/libnccl.so.2"
	local := ".venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"
	e := fakeEnv(map[string]string{"HOME": "/home/u"}, torch, cu13, local)
	e.python = func() ([]string, error) { return []string{"/srv/py/lib/python3.13/site-packages"}, nil }
	got := e.candidates(ncclLibrary)
	for _, want := range []string{torch, cu13, local} {
		if !slices.Contains(got, want) {
			t.Errorf("candidates %v lack %s", got, want)
		}
	}
	// The python3 on PATH comes before the guessed locations.
	if i, j := slices.Index(got, cu13), slices.Index(got, torch); i > j {
		t.Errorf("python3's site-packages (%d) after /opt/*/.venv (%d): %v", i, j, got)
	}
	err := e.notFound(ncclLibrary, nil, nil)
	for _, want := range []string{"/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib", "/srv/py/lib/python3.13/site-packages/nvidia/cu13/lib", EnvNCCLLib} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("not-found error %q lacks %q", err, want)
		}
	}
}

// TestPythonSitePackages asks a python3 on PATH (a script here) and keeps
// only package directories.
func TestPythonSitePackages(t *testing.T) {
	dir := t.TempDir()
	script := "#!/bin/sh\nprintf '/x/lib/python3.12/site-packages\\n/x/lib/python312.zip\\n/usr/lib/python3/dist-packages\\n'\n"
	if err := os.WriteFile(filepath.Join(dir, "python3"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	got, err := pythonSitePackages()
	if err != nil || !slices.Equal(got, []string{"/x/lib/python3.12/site-packages", "/usr/lib/python3/dist-packages"}) {
		t.Errorf("pythonSitePackages() = %v, %v", got, err)
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := pythonSitePackages(); err == nil {
		t.Error("no python3 on PATH, but no error")
	}
}

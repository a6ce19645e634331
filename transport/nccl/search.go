package nccl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Environment variables that name the libraries explicitly. When one is
// set, only that file is tried.
const (
	EnvNCCLLib = "COLLKIT_NCCL_LIB"
	EnvCUDALib = "COLLKIT_CUDA_LIB" // the CUDA driver, libcuda.so.1
)

// ErrNotAvailable is wrapped by New, Connect and Available when NCCL or the
// CUDA driver cannot be loaded on this machine (not installed, not found,
// or not a platform purego can load libraries on).
var ErrNotAvailable = errors.New("NCCL not available")

// library describes one shared library to find: the names the dynamic
// loader is asked for, and where pip wheels and the toolkit put it.
type library struct {
	what    string   // "libnccl.so.2"
	env     string   // override variable
	sonames []string // tried through the loader's own search path
	// pipDirs are the directories under site-packages where pip wheels put
	// it: nvidia/nccl/lib (nvidia-nccl-cu12, -cu13), nvidia/cu13/lib (the
	// CUDA 13 wheels' shared directory).
	pipDirs []string
	dirs    []string // system directories tried with sonames
	hint    string   // how to install it
}

var (
	ncclLibrary = library{
		what:    "libnccl.so.2",
		env:     EnvNCCLLib,
		sonames: []string{"libnccl.so.2", "libnccl.so"},
		pipDirs: []string{"nvidia/nccl/lib", "nvidia/cu13/lib", "nvidia/cu12/lib"},
		dirs:    []string{"/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/local/cuda/targets/sbsa-linux/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64"},
		hint:    "install NCCL (e.g. pip install nvidia-nccl-cu13, or -cu12) or set " + EnvNCCLLib + " to libnccl.so.2's path",
	}
	cudaLibrary = library{
		what:    "libcuda.so.1",
		env:     EnvCUDALib,
		sonames: []string{"libcuda.so.1", "libcuda.so"},
		dirs:    []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/local/nvidia/lib64", "/usr/lib/wsl/lib"},
		hint:    "install the NVIDIA driver (nvidia-smi must work) or set " + EnvCUDALib + " to libcuda.so.1's path",
	}
)

// searchEnv is what the search reads from the outside world, so tests can
// give it another one.
type searchEnv struct {
	getenv func(string) string
	glob   func(string) ([]string, error)
	exists func(string) bool
	// python lists the site-packages directories of the python3 on PATH;
	// nil or an error means none.
	python func() ([]string, error)
}

var osSearchEnv = searchEnv{
	getenv: os.Getenv,
	glob:   filepath.Glob,
	exists: func(p string) bool { _, err := os.Stat(p); return err == nil },
	python: sync.OnceValues(pythonSitePackages),
}

// pythonSitePackages asks the python3 on PATH, once, where its packages
// live: that finds the wheels of whatever environment is active without a
// variable. It is bounded by a short timeout, since it runs in New.
func pythonSitePackages() ([]string, error) {
	py, err := exec.LookPath("python3")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-I", "-c",
		"import site,sys\nfor p in site.getsitepackages()+[site.getusersitepackages()]+sys.path: print(p)").Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", py, err)
	}
	var dirs []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); strings.HasSuffix(l, "-packages") {
			dirs = append(dirs, l)
		}
	}
	return dirs, nil
}

// sitePackages lists the Python package directories where pip puts the
// nvidia-* wheels: the active virtualenv or conda env, PYTHONPATH, those of
// the python3 on PATH, the user's, common virtualenv and conda locations,
// and the system ones.
func (e searchEnv) sitePackages() []string {
	var dirs []string
	add := func(pattern string) {
		ms, _ := e.glob(pattern)
		slices.Sort(ms)
		// Newest Python first.
		slices.Reverse(ms)
		dirs = append(dirs, ms...)
	}
	env := func(prefix string) {
		add(filepath.Join(prefix, "lib", "python3*", "site-packages"))
	}
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := e.getenv(v); p != "" {
			env(p)
		}
	}
	for _, p := range filepath.SplitList(e.getenv("PYTHONPATH")) {
		if p != "" {
			dirs = append(dirs, p)
		}
	}
	if e.python != nil {
		if ps, err := e.python(); err == nil {
			dirs = append(dirs, ps...)
		}
	}
	home := e.getenv("HOME")
	if home != "" {
		add(filepath.Join(home, ".local", "lib", "python3*", "site-packages"))
	}
	// Environments made where people usually make them.
	for _, p := range []string{".venv", "venv"} {
		env(p)
		env(filepath.Join("/opt", "*", p))
		if home != "" {
			env(filepath.Join(home, p))
		}
	}
	for _, p := range []string{"/opt/conda", "/opt/miniconda3", "/opt/anaconda3"} {
		env(p)
	}
	if home != "" {
		for _, p := range []string{"miniconda3", "anaconda3", "miniforge3"} {
			env(filepath.Join(home, p))
		}
	}
	add("/usr/local/lib/python3*/dist-packages")
	add("/usr/local/lib/python3*/site-packages")
	add("/usr/lib/python3*/dist-packages")
	add("/usr/lib/python3/dist-packages")
	var out []string
	for _, d := range dirs {
		if d = filepath.Clean(d); !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// candidates lists what to hand dlopen, in order: the override alone when
// it is set; otherwise the plain names (LD_LIBRARY_PATH, the ldconfig
// cache), then pip wheel layouts, then the system's directories.
func (e searchEnv) candidates(lib library) []string {
	if p := e.getenv(lib.env); p != "" {
		return []string{p}
	}
	c := slices.Clone(lib.sonames)
	var files []string
	for _, dir := range e.pipLibDirs(lib) {
		for _, n := range lib.sonames {
			files = append(files, filepath.Join(dir, n))
		}
	}
	for _, dir := range lib.dirs {
		for _, n := range lib.sonames {
			files = append(files, filepath.Join(dir, n))
		}
	}
	for _, f := range files {
		if e.exists(f) && !slices.Contains(c, f) {
			c = append(c, f)
		}
	}
	return c
}

// pipLibDirs are lib's wheel directories under every site-packages.
func (e searchEnv) pipLibDirs(lib library) []string {
	var dirs []string
	if len(lib.pipDirs) == 0 {
		return nil
	}
	for _, sp := range e.sitePackages() {
		for _, d := range lib.pipDirs {
			dirs = append(dirs, filepath.Join(sp, d))
		}
	}
	return dirs
}

// searched renders the places a failed search looked, for the error.
func (e searchEnv) searched(lib library) string {
	if p := e.getenv(lib.env); p != "" {
		return fmt.Sprintf("%s=%s", lib.env, p)
	}
	places := []string{"the dynamic loader's path (LD_LIBRARY_PATH, ldconfig)"}
	places = append(places, e.pipLibDirs(lib)...)
	places = append(places, lib.dirs...)
	return strings.Join(places, ", ")
}

// notFound is the error of a library no candidate of which loaded.
func (e searchEnv) notFound(lib library, tried []string, errs []error) error {
	detail := ""
	// Name the loader's complaint when a file exists but did not load
	// (wrong architecture, a missing dependency): that is the useful part.
	for i, err := range errs {
		if strings.HasPrefix(tried[i], "/") || e.getenv(lib.env) != "" {
			detail = fmt.Sprintf(" (%s: %v)", tried[i], err)
			break
		}
	}
	return fmt.Errorf("nccl: %w: %s not found (searched: %s)%s; %s",
		ErrNotAvailable, lib.what, e.searched(lib), detail, lib.hint)
}

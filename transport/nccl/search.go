package nccl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Environment variables that name the libraries explicitly. When one is
// set, only that file is tried.
const (
	EnvNCCLLib   = "COLLKIT_NCCL_LIB"
	EnvCUDARTLib = "COLLKIT_CUDART_LIB"
)

// ErrNotAvailable is wrapped by New, Connect and Available when NCCL or the
// CUDA runtime cannot be loaded on this machine (not installed, not found,
// or not a platform purego can load libraries on).
var ErrNotAvailable = errors.New("NCCL not available")

// library describes one shared library to find: the names the dynamic
// loader is asked for, and where pip wheels put it.
type library struct {
	what     string   // "libnccl.so.2"
	env      string   // override variable
	sonames  []string // tried through the loader's own search path
	pipDir   string   // under site-packages: nvidia/<pipDir>/lib
	pipNames []string // file names inside that directory
	hint     string   // how to install it
}

var (
	ncclLibrary = library{
		what:     "libnccl.so.2",
		env:      EnvNCCLLib,
		sonames:  []string{"libnccl.so.2", "libnccl.so"},
		pipDir:   "nccl",
		pipNames: []string{"libnccl.so.2"},
		hint:     "install NCCL (e.g. pip install nvidia-nccl-cu12) or set " + EnvNCCLLib,
	}
	cudartLibrary = library{
		what:     "libcudart.so",
		env:      EnvCUDARTLib,
		sonames:  []string{"libcudart.so.12", "libcudart.so.11.0", "libcudart.so.11", "libcudart.so"},
		pipDir:   "cuda_runtime",
		pipNames: []string{"libcudart.so.12", "libcudart.so.11.0", "libcudart.so"},
		hint:     "install the CUDA runtime (e.g. pip install nvidia-cuda-runtime-cu12) or set " + EnvCUDARTLib,
	}
)

// searchEnv is what the search reads from the outside world, so tests can
// give it another one.
type searchEnv struct {
	getenv func(string) string
	glob   func(string) ([]string, error)
	exists func(string) bool
}

var osSearchEnv = searchEnv{
	getenv: os.Getenv,
	glob:   filepath.Glob,
	exists: func(p string) bool { _, err := os.Stat(p); return err == nil },
}

// sitePackages lists the Python package directories where pip puts the
// nvidia-* wheels: the active virtualenv or conda env, PYTHONPATH, the
// user's site and the system ones.
func (e searchEnv) sitePackages() []string {
	var dirs []string
	add := func(pattern string) {
		ms, _ := e.glob(pattern)
		slices.Sort(ms)
		// Newest Python first.
		slices.Reverse(ms)
		dirs = append(dirs, ms...)
	}
	for _, v := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if p := e.getenv(v); p != "" {
			add(filepath.Join(p, "lib", "python3*", "site-packages"))
		}
	}
	for _, p := range filepath.SplitList(e.getenv("PYTHONPATH")) {
		if p != "" {
			dirs = append(dirs, p)
		}
	}
	if h := e.getenv("HOME"); h != "" {
		add(filepath.Join(h, ".local", "lib", "python3*", "site-packages"))
	}
	add("/usr/local/lib/python3*/dist-packages")
	add("/usr/local/lib/python3*/site-packages")
	add("/usr/lib/python3*/dist-packages")
	add("/usr/lib/python3/dist-packages")
	add("/opt/conda/lib/python3*/site-packages")
	var out []string
	for _, d := range dirs {
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// candidates lists what to hand dlopen, in order: the override alone when
// it is set; otherwise the plain names (LD_LIBRARY_PATH, the ldconfig
// cache), then pip wheel layouts, then the CUDA toolkit's directory.
func (e searchEnv) candidates(lib library) []string {
	if p := e.getenv(lib.env); p != "" {
		return []string{p}
	}
	c := slices.Clone(lib.sonames)
	var files []string
	for _, sp := range e.sitePackages() {
		for _, n := range lib.pipNames {
			files = append(files, filepath.Join(sp, "nvidia", lib.pipDir, "lib", n))
		}
	}
	for _, dir := range []string{"/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu"} {
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

// searched renders the places a failed search looked, for the error.
func (e searchEnv) searched(lib library) string {
	if p := e.getenv(lib.env); p != "" {
		return fmt.Sprintf("%s=%s", lib.env, p)
	}
	places := []string{"the dynamic loader's path (LD_LIBRARY_PATH, ldconfig)"}
	for _, sp := range e.sitePackages() {
		places = append(places, filepath.Join(sp, "nvidia", lib.pipDir, "lib"))
	}
	places = append(places, "/usr/local/cuda/lib64")
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

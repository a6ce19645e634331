package bench

import (
	"bufio"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
)

// Environment describes the machine and build a File was measured with.
type Environment struct {
	Host           string `json:"host"`
	OS             string `json:"os"`
	Arch           string `json:"arch"`
	CPUModel       string `json:"cpu_model"` // from /proc/cpuinfo; empty where there is none
	Cores          int    `json:"cores"`     // logical CPUs this process may use
	Kernel         string `json:"kernel"`    // uname: system, release and version
	GoVersion      string `json:"go_version"`
	CollkitVersion string `json:"collkit_version"` // module version, plus the VCS revision when built from a checkout
}

// CurrentEnvironment describes this machine and binary.
func CurrentEnvironment() Environment {
	host, _ := os.Hostname()
	return Environment{
		Host:           host,
		OS:             runtime.GOOS,
		Arch:           runtime.GOARCH,
		CPUModel:       cpuModel("/proc/cpuinfo"),
		Cores:          runtime.NumCPU(),
		Kernel:         kernel(),
		GoVersion:      runtime.Version(),
		CollkitVersion: collkitVersion(),
	}
}

// cpuModel reads the first "model name" (x86) or "Model"/"Hardware" (arm)
// line of a cpuinfo file.
func cpuModel(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(key) {
		case "model name", "Model", "Hardware", "cpu model":
			return strings.TrimSpace(value)
		}
	}
	return ""
}

const modulePath = "github.com/collkit/collkit"

// collkitVersion is collkit's version in this binary: the main module's or
// the dependency's, with the VCS revision ("+dirty" for local changes) when
// the build recorded one.
func collkitVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	version := ""
	if bi.Main.Path == modulePath {
		version = bi.Main.Version
	}
	for _, dep := range bi.Deps {
		if dep.Path == modulePath {
			version = dep.Version
		}
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if version == "" {
		version = "unknown"
	}
	if rev != "" && bi.Main.Path == modulePath {
		version += " " + rev + dirty
	}
	return version
}

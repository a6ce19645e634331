//go:build !(linux && (amd64 || arm64))

package nccl

import (
	"fmt"
	"runtime"
)

func load(searchEnv) (*api, error) {
	return nil, fmt.Errorf("nccl: %w: loading %s at run time is supported on linux/amd64 and linux/arm64 only, not %s/%s",
		ErrNotAvailable, ncclLibrary.what, runtime.GOOS, runtime.GOARCH)
}

func loadDefault() (*api, error) { return load(osSearchEnv) }

func available() error { _, err := loadDefault(); return err }

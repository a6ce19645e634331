package nccl

import (
	"os"
	"testing"
)

// fakeDir holds the fake library the binding tests build; TestMain removes it.
var fakeDir string

func mkdirTemp() (string, error) {
	d, err := os.MkdirTemp("", "collkit-fake-nccl-")
	fakeDir = d
	return d, err
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fakeDir != "" {
		os.RemoveAll(fakeDir)
	}
	os.Exit(code)
}

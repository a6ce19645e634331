package nccl

import "os"

func mkdirTemp() (string, error) { return os.MkdirTemp("", "collkit-fake-nccl-") }

//go:build !linux

package tcp

import (
	"errors"
	"fmt"
)

// pickCongestion: only Linux lets a socket choose its congestion control,
// so the connections use the system's and only "" and CongestionSystem are
// accepted.
func pickCongestion(want string) (string, error) {
	if want == "" || want == CongestionSystem {
		return "", nil
	}
	return "", fmt.Errorf("congestion control %q: only Linux lets a socket choose one; leave Congestion empty", want)
}

func setCongestion(fd uintptr, name string) error {
	return errors.New("not supported on this platform")
}

func ensureCongestion(fd uintptr, name string) {}

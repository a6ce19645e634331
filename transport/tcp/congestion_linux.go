package tcp

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// pickCongestion returns the congestion control the connections will use:
// want if the kernel lets this process set it, else an error that says
// which it may set. For want "" it is the first of defaultCongestion that
// the kernel allows, or "" (the kernel's default) when none is; for
// CongestionSystem it is "". It tries them on a socket of its own, so New
// reports a bad name before any connection exists.
func pickCongestion(want string) (string, error) {
	if want == CongestionSystem {
		return "", nil
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	}
	if err != nil {
		return "", fmt.Errorf("a socket to try the congestion control on: %w", err)
	}
	defer unix.Close(fd)
	if want != "" {
		if err := setCongestion(uintptr(fd), want); err != nil {
			return "", fmt.Errorf("congestion control %q: %w (this process may set: %s; root may set any of: %s; or use %q for the kernel's default)",
				want, err, sysctl("tcp_allowed_congestion_control"), sysctl("tcp_available_congestion_control"), CongestionSystem)
		}
		return want, nil
	}
	for _, name := range defaultCongestion {
		if setCongestion(uintptr(fd), name) == nil {
			return name, nil
		}
	}
	return "", nil
}

// setCongestion sets socket fd's congestion control. Set before the
// connection starts (before connect, or on the listener) it is the only one
// the connection runs. Set later, it replaces the kernel's default, which
// has already run its start-up: bbr's turns on the socket's pacing, which
// stays on under the new control, paced at a rate computed from its window
// (1 MiB all-gathers at 4 ranks on 2 cores took twice as long as unpaced).
func setCongestion(fd uintptr, name string) error {
	return unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
}

// ensureCongestion sets socket fd's congestion control if it has another.
func ensureCongestion(fd uintptr, name string) {
	if cur, err := unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION); err != nil || cur != name {
		setCongestion(fd, name)
	}
}

// sysctl reads net.ipv4.NAME, or says it could not.
func sysctl(name string) string {
	b, err := os.ReadFile("/proc/sys/net/ipv4/" + name)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return strings.TrimSpace(string(b))
}

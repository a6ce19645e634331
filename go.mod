module github.com/collkit/collkit

go 1.26.0

require (
	github.com/Mellanox/rdmamap v1.2.0
	github.com/spf13/pflag v1.0.10
	golang.org/x/sys v0.49.0
	gonum.org/v1/gonum v0.17.0
)

require (
	github.com/vishvananda/netlink v1.3.1 // indirect
	github.com/vishvananda/netns v0.0.5 // indirect
)

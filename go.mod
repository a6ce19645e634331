module github.com/collkit/collkit

go 1.26.0

require (
	github.com/spf13/pflag v1.0.10
	golang.org/x/sys v0.49.0
	gonum.org/v1/gonum v0.17.0
)

require go.uber.org/goleak v1.3.0 // indirect

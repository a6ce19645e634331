package main

// --algo and --transport accept, besides the built-ins, every all-reduce
// algorithm and transport registered with collkit.RegisterAlgorithm and
// collkit.RegisterTransport in this program. To benchmark your own, import
// the package that registers it here, for its side effects:
//
//	import _ "example.com/yourmodule/youralgo"
//
// Every rank of a job must run a collbench built with the same imports.

// Package chart draws benchmark results (bench.Report) as a figure: bus
// bandwidth against message size above, latency (median time per
// iteration) against message size below, one line per combination, sizes
// on a log scale. collbench --plot and `collbench plot` use it.
//
//	f, _ := bench.ReadJSONFile("result.json")
//	err := chart.Save("result.png", f.Reports) // or .svg
package chart

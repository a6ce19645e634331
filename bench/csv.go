package bench

import (
	"encoding/csv"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
)

// CSVColumns are the columns WriteCSV writes, in order (see SCHEMA.md). Every
// line is one placement (out_of_place or in_place) of one size of one
// combination, and repeats the environment so that lines stand alone.
// wrong is empty where nothing was checked (checked false).
var CSVColumns = []string{
	"schema", "collective", "algorithm", "transport", "ranks", "transport_settings",
	"bytes", "count", "dtype", "op", "root", "placement", "ran_algorithm",
	"iters", "time_us", "rank_time", "rank_avg_us", "rank_min_us", "rank_max_us", "rank0_us",
	"min_us", "p50_us", "p99_us", "max_us", "cv", "algbw_gbs", "busbw_gbs", "wrong", "checked",
	"host", "cpu_model", "cores", "kernel", "go_version", "collkit_version", "started",
}

// WriteCSV writes f as CSV with a header line of CSVColumns.
func WriteCSV(w io.Writer, f File) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVColumns); err != nil {
		return err
	}
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	env := f.Environment
	for _, r := range f.Reports {
		settings := make([]string, 0, len(r.TransportSettings))
		for _, k := range slices.Sorted(maps.Keys(r.TransportSettings)) {
			settings = append(settings, k+"="+r.TransportSettings[k])
		}
		for _, row := range r.Rows {
			for _, p := range []struct {
				name string
				m    Measurement
			}{{"out_of_place", row.OutOfPlace}, {"in_place", row.InPlace}} {
				m := p.m
				wrong := ""
				if m.Checked {
					wrong = strconv.FormatInt(m.Wrong, 10)
				}
				line := []string{
					f.Schema, r.Collective, r.Algorithm, r.TransportsRan(), strconv.Itoa(r.Ranks), strings.Join(settings, ";"),
					strconv.FormatInt(row.Bytes, 10), strconv.FormatInt(row.Count, 10), row.DType, row.Op, strconv.Itoa(row.Root), p.name, row.Algorithm,
					strconv.Itoa(m.Iters), g(m.TimeUS), r.rankTime().String(), g(m.RankAvgUS), g(m.RankMinUS), g(m.RankMaxUS), g(m.Rank0US),
					g(m.MinUS), g(m.P50US), g(m.P99US), g(m.MaxUS), g(m.CV), g(m.AlgBW), g(m.BusBW), wrong, strconv.FormatBool(m.Checked),
					env.Host, env.CPUModel, strconv.Itoa(env.Cores), env.Kernel, env.GoVersion, env.CollkitVersion, r.Started.Format("2006-01-02T15:04:05Z07:00"),
				}
				if err := cw.Write(line); err != nil {
					return err
				}
			}
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteCSVFile saves f to path as CSV.
func WriteCSVFile(path string, f File) error {
	file, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("writing CSV results: %w", err)
	}
	if err := WriteCSV(file, f); err != nil {
		file.Close()
		return fmt.Errorf("writing CSV results to %s: %w", path, err)
	}
	if err := file.Close(); err != nil {
		return fmt.Errorf("writing CSV results to %s: %w", path, err)
	}
	return nil
}

package chart

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/collkit/collkit/bench"
)

// ErrFormat is returned by Save for a file name that is not .png or .svg.
var ErrFormat = errors.New("chart: unsupported image format (use a .png or .svg file name)")

// ErrNoData is returned when no report has a row to draw.
var ErrNoData = errors.New("chart: no results to draw")

// Size of the figure.
const (
	width  = 8 * vg.Inch
	height = 9 * vg.Inch
)

// Save draws reports into path; the extension (.png or .svg) picks the
// format. Each line's legend is bench.DistinctLabels of the reports.
func Save(path string, reports []bench.Report) error {
	return SaveLabeled(path, reports, nil)
}

// SaveLabeled is Save with a legend label per report; nil labels means
// bench.DistinctLabels(reports, nil).
func SaveLabeled(path string, reports []bench.Report, labels []string) error {
	format := strings.ToLower(strings.TrimPrefix(filepath.Ext(path), "."))
	if format != "png" && format != "svg" {
		return fmt.Errorf("%w: %s", ErrFormat, path)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if err := WriteLabeled(f, format, reports, labels); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return nil
}

// Write draws reports in format ("png" or "svg") to w.
func Write(w io.Writer, format string, reports []bench.Report) error {
	return WriteLabeled(w, format, reports, nil)
}

// WriteLabeled is Write with a legend label per report, as SaveLabeled.
func WriteLabeled(w io.Writer, format string, reports []bench.Report, labels []string) error {
	if labels == nil {
		labels = bench.DistinctLabels(reports, nil)
	}
	if len(labels) != len(reports) {
		return fmt.Errorf("chart: %d labels for %d results", len(labels), len(reports))
	}
	bw, lat, err := plots(reports, labels)
	if err != nil {
		return err
	}
	var c interface {
		vg.CanvasSizer
		io.WriterTo
	}
	switch format {
	case "png":
		img := vgimg.NewWith(vgimg.UseWH(width, height), vgimg.UseDPI(110))
		c = pngCanvas{img}
	case "svg":
		c = vgsvg.New(width, height)
	default:
		return fmt.Errorf("%w: %q", ErrFormat, format)
	}
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Millimeter, PadY: 6 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	dc := draw.New(c)
	bw.Draw(tiles.At(dc, 0, 0))
	lat.Draw(tiles.At(dc, 0, 1))
	if _, err := c.WriteTo(w); err != nil {
		return fmt.Errorf("chart: writing %s: %w", format, err)
	}
	return nil
}

type pngCanvas struct{ *vgimg.Canvas }

func (c pngCanvas) WriteTo(w io.Writer) (int64, error) {
	return vgimg.PngCanvas{Canvas: c.Canvas}.WriteTo(w)
}

// plots builds the bandwidth and latency plots from the time column and
// the busbw computed from it, the figures of the table, the JSON and the
// CSV.
func plots(reports []bench.Report, labels []string) (bw, lat *plot.Plot, err error) {
	bw, lat = plot.New(), plot.New()
	title, stat := "collective", "each result's time column (see the legend)"
	if len(reports) > 0 {
		title = reports[0].Collective
		stat = timeColumn(reports[0])
	}
	for _, r := range reports {
		if r.Collective != title {
			title = "collectives"
		}
		if timeColumn(r) != timeColumn(reports[0]) {
			stat = "each result's time column (see the legend)"
		}
	}
	bw.Title.Text = title + ": bus bandwidth, out-of-place; time = " + stat
	bw.Y.Label.Text = "busbw (GB/s)"
	lat.Title.Text = title + ": time (out-of-place) = " + stat
	// Short: gonum centres an axis label on the linear midpoint, which on a
	// log axis sits high, and a long label pushes the plot down.
	lat.Y.Label.Text = "time (us)"
	lat.Y.Scale = plot.LogScale{}
	lat.Y.Tick.Marker = plot.TickerFunc(logTicks)
	for _, p := range []*plot.Plot{bw, lat} {
		p.X.Label.Text = "message size (bytes)"
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.TickerFunc(sizeTicks)
		p.Legend.Top = true
		p.Legend.Left = true
		p.Legend.XOffs = 4 * vg.Millimeter
		p.Legend.YOffs = -2 * vg.Millimeter
		p.Add(plotter.NewGrid())
	}
	bw.Y.Min = 0

	colors := Palette(len(reports))
	drawn := 0
	for i, r := range reports {
		bwPts, latPts := series(r)
		if len(bwPts) == 0 {
			continue
		}
		drawn++
		label := labels[i]
		for _, pair := range []struct {
			p   *plot.Plot
			pts plotter.XYs
		}{{bw, bwPts}, {lat, latPts}} {
			line, points, err := plotter.NewLinePoints(pair.pts)
			if err != nil {
				return nil, nil, fmt.Errorf("chart: %s: %w", label, err)
			}
			line.Color = colors[i]
			line.Dashes = plotutil.Dashes(i % 3)
			line.Width = vg.Points(1.5)
			points.Color = colors[i]
			points.Shape = plotutil.Shape(i)
			pair.p.Add(line, points)
			pair.p.Legend.Add(label, line, points)
		}
	}
	if drawn == 0 {
		return nil, nil, ErrNoData
	}
	return bw, lat, nil
}

// series are the points of one report: busbw and time against size, out
// of place, as the table prints them.
func series(r bench.Report) (bw, lat plotter.XYs) {
	for _, row := range r.Rows {
		m := row.OutOfPlace
		if row.Bytes <= 0 || m.TimeUS <= 0 {
			continue
		}
		bw = append(bw, plotter.XY{X: float64(row.Bytes), Y: m.BusBW})
		lat = append(lat, plotter.XY{X: float64(row.Bytes), Y: m.TimeUS})
	}
	return bw, lat
}

// timeColumn names a report's time statistic for a title.
func timeColumn(r bench.Report) string {
	t, _ := bench.ParseRankTime(r.RankTime)
	return t.Short()
}

// tab10 is a categorical palette whose colours stay apart on white.
var tab10 = []color.RGBA{
	{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255}, {148, 103, 189, 255},
	{140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255}, {188, 189, 34, 255}, {23, 190, 207, 255},
}

// Palette returns n colours, all different: a categorical palette up to
// ten, beyond that hues spread evenly around the wheel at alternating
// lightness.
func Palette(n int) []color.Color {
	out := make([]color.Color, n)
	for i := range out {
		if n <= len(tab10) {
			out[i] = tab10[i]
			continue
		}
		light := []float64{0.45, 0.30}[i%2]
		out[i] = hsl(float64(i)/float64(n), 0.75, light)
	}
	return out
}

// hsl converts hue (0..1), saturation and lightness to RGB.
func hsl(h, s, l float64) color.RGBA {
	c := (1 - math.Abs(2*l-1)) * s
	hp := h * 6
	x := c * (1 - math.Abs(math.Mod(hp, 2)-1))
	var r, g, b float64
	switch int(hp) % 6 {
	case 0:
		r, g = c, x
	case 1:
		r, g = x, c
	case 2:
		g, b = c, x
	case 3:
		g, b = x, c
	case 4:
		r, b = x, c
	default:
		r, b = c, x
	}
	m := l - c/2
	to := func(v float64) uint8 { return uint8(math.Round(255 * (v + m))) }
	return color.RGBA{to(r), to(g), to(b), 255}
}

// sizeTicks marks powers of two with byte labels (8B, 1K, 64M), labelling
// about eight of them across the range.
func sizeTicks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= lo {
		return []plot.Tick{{Value: lo, Label: formatBytes(lo)}}
	}
	first, last := int(math.Floor(math.Log2(lo))), int(math.Ceil(math.Log2(hi)))
	step := max(1, (last-first+7)/8)
	var ticks []plot.Tick
	for e := first; e <= last; e++ {
		v := math.Exp2(float64(e))
		if v < lo || v > hi {
			continue
		}
		label := ""
		if (e-first)%step == 0 {
			label = formatBytes(v)
		}
		ticks = append(ticks, plot.Tick{Value: v, Label: label})
	}
	return ticks
}

// logTicks are plot.LogTicks kept inside [lo, hi] (gonum's reach past the
// data and leave a gap), with 2x and 5x labelled when a decade or less is
// shown.
func logTicks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	labelled := 0
	for _, t := range (plot.LogTicks{Prec: -1}).Ticks(lo, hi) {
		if t.Value >= lo*(1-1e-9) && t.Value <= hi*(1+1e-9) {
			ticks = append(ticks, t)
			if t.Label != "" {
				labelled++
			}
		}
	}
	if labelled < 2 {
		for i, t := range ticks {
			if m := t.Value / math.Pow10(int(math.Floor(math.Log10(t.Value)))); math.Abs(m-2) < 1e-9 || math.Abs(m-5) < 1e-9 {
				ticks[i].Label = strconv.FormatFloat(t.Value, 'g', -1, 64)
			}
		}
	}
	return ticks
}

func formatBytes(v float64) string {
	b := int64(v)
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%dG", b>>30)
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%dM", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%dK", b>>10)
	}
	return fmt.Sprintf("%dB", b)
}

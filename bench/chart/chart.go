package chart

import (
	"errors"
	"fmt"
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
// format.
func Save(path string, reports []bench.Report) error {
	format := strings.ToLower(strings.TrimPrefix(filepath.Ext(path), "."))
	if format != "png" && format != "svg" {
		return fmt.Errorf("%w: %s", ErrFormat, path)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if err := Write(f, format, reports); err != nil {
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
	bw, lat, err := plots(reports)
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

// plots builds the bandwidth and latency plots.
func plots(reports []bench.Report) (bw, lat *plot.Plot, err error) {
	bw, lat = plot.New(), plot.New()
	title := "collective"
	if len(reports) > 0 {
		title = reports[0].Collective
	}
	bw.Title.Text = title + ": bus bandwidth (out-of-place, at the median iteration time)"
	bw.Y.Label.Text = "busbw (GB/s)"
	lat.Title.Text = title + ": latency (median iteration time of the slowest rank)"
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

	drawn := 0
	for i, r := range reports {
		var bwPts, latPts plotter.XYs
		for _, row := range r.Rows {
			us := row.OutOfPlace.Typical()
			if row.Bytes <= 0 || us <= 0 {
				continue
			}
			busbw := 0.0
			if row.OutOfPlace.TimeUS > 0 {
				busbw = row.OutOfPlace.BusBW * row.OutOfPlace.TimeUS / us
			}
			bwPts = append(bwPts, plotter.XY{X: float64(row.Bytes), Y: busbw})
			latPts = append(latPts, plotter.XY{X: float64(row.Bytes), Y: us})
		}
		if len(bwPts) == 0 {
			continue
		}
		drawn++
		label := r.Label()
		for _, pair := range []struct {
			p   *plot.Plot
			pts plotter.XYs
		}{{bw, bwPts}, {lat, latPts}} {
			line, points, err := plotter.NewLinePoints(pair.pts)
			if err != nil {
				return nil, nil, fmt.Errorf("chart: %s: %w", label, err)
			}
			line.Color = plotutil.Color(i)
			line.Dashes = plotutil.Dashes(i / len(plotutil.DefaultColors))
			line.Width = vg.Points(1.5)
			points.Color = plotutil.Color(i)
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

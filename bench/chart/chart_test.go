package chart_test

import (
	"bytes"
	"errors"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/collkit/collkit/bench"
	"github.com/collkit/collkit/bench/chart"
)

// reports are two combinations with latency a and bandwidth b each.
func reports() []bench.Report {
	var out []bench.Report
	for _, c := range []struct {
		algo   string
		latUS  float64
		bwGBps float64
	}{{"ring", 40, 1.2}, {"tree", 15, 0.6}} {
		r := bench.Report{Collective: "allreduce", Algorithm: c.algo, Transport: "tcp", Ranks: 4}
		var rows []bench.Row
		for b := int64(8); b <= 64<<20; b *= 4 {
			us := c.latUS + float64(b)/(c.bwGBps*1e3)
			m := bench.Measurement{TimeUS: us, AlgBW: float64(b) / us / 1e3}
			m.BusBW = m.AlgBW * bench.AllReduceBusFactor(4)
			m.P50US = us
			rows = append(rows, bench.Row{Bytes: b, OutOfPlace: m, InPlace: m})
		}
		r.Finish(rows)
		out = append(out, r)
	}
	return out
}

func TestSavePNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "result.png")
	if err := chart.Save(path, reports()); err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("CHART_KEEP"); dir != "" { // to look at it: CHART_KEEP=/tmp go test
		b, _ := os.ReadFile(path)
		os.WriteFile(filepath.Join(dir, "chart-test.png"), b, 0o644)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	bounds := img.Bounds()
	if bounds.Dx() < 600 || bounds.Dy() < 600 {
		t.Fatalf("image %v, want a full figure", bounds)
	}
	colors := map[[3]uint32]bool{}
	for y := bounds.Min.Y; y < bounds.Max.Y; y += 3 {
		for x := bounds.Min.X; x < bounds.Max.X; x += 3 {
			r, g, b, _ := img.At(x, y).RGBA()
			colors[[3]uint32{r >> 8, g >> 8, b >> 8}] = true
		}
	}
	if len(colors) < 4 {
		t.Fatalf("%d colours: the figure is blank", len(colors))
	}
}

func TestWriteSVG(t *testing.T) {
	var b bytes.Buffer
	if err := chart.Write(&b, "svg", reports()); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	for _, want := range []string{"<svg", "allreduce/ring/tcp/4r", "allreduce/tree/tcp/4r", "message size (bytes)", "16M", "time (out-of-place)", "mean (-a 3)"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

func TestErrors(t *testing.T) {
	if err := chart.Save(filepath.Join(t.TempDir(), "x.gif"), reports()); !errors.Is(err, chart.ErrFormat) {
		t.Errorf(".gif: %v, want ErrFormat", err)
	}
	if err := chart.Write(&bytes.Buffer{}, "png", nil); !errors.Is(err, chart.ErrNoData) {
		t.Errorf("no reports: %v, want ErrNoData", err)
	}
}

// Every colour of a figure differs, up to many series.
func TestPaletteDistinct(t *testing.T) {
	for _, n := range []int{1, 7, 10, 11, 24, 40} {
		seen := map[[4]uint32]bool{}
		for i, c := range chart.Palette(n) {
			r, g, b, a := c.RGBA()
			k := [4]uint32{r >> 8, g >> 8, b >> 8, a >> 8}
			if seen[k] {
				t.Fatalf("%d colours: colour %d repeats %v", n, i, k)
			}
			seen[k] = true
		}
	}
}

// Two files with the same combination get two legend entries that say
// which file each is.
func TestLabelsOfTwoFiles(t *testing.T) {
	rs := reports()[:1]
	both := append(rs, rs...)
	var b bytes.Buffer
	labels := bench.DistinctLabels(both, []string{"base.json", "new.json"})
	if err := chart.WriteLabeled(&b, "svg", both, labels); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"allreduce/ring/tcp/4r base.json", "allreduce/ring/tcp/4r new.json"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("SVG lacks the legend %q", want)
		}
	}
}

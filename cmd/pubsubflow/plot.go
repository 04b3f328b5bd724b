package main

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Plot geometry: one panel per run, stacked.
const (
	plotWidth       = 9 * vg.Inch
	plotPanelHeight = 3.5 * vg.Inch
)

// series of a run's plot, with their colours.
var plotSeries = []struct {
	name  string
	color color.RGBA
	value func(s snapshot) int64
	// serverOnly series exist only on the embedded server.
	serverOnly bool
}{
	{"outstanding (client)", color.RGBA{R: 31, G: 119, B: 180, A: 255}, func(s snapshot) int64 { return s.outstanding }, false},
	{"buffered", color.RGBA{R: 255, G: 127, B: 14, A: 255}, func(s snapshot) int64 { return s.buffered }, false},
	{"processing", color.RGBA{R: 44, G: 160, B: 44, A: 255}, func(s snapshot) int64 { return s.processing }, false},
	{"redeliveries (total)", color.RGBA{R: 214, G: 39, B: 40, A: 255}, func(s snapshot) int64 { return s.redelivered }, false},
	{"acked (total)", color.RGBA{R: 148, G: 103, B: 189, A: 255}, func(s snapshot) int64 { return s.acked }, false},
	{"outstanding (server)", color.RGBA{R: 127, G: 127, B: 127, A: 255}, func(s snapshot) int64 { return s.serverOutstanding }, true},
}

func checkPlotFile(path string) error {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg", ".png":
	default:
		return usagef("--plot %q: want a .svg or .png file", path)
	}
	// Before the run, not after it: a missing or read-only directory
	// would otherwise waste the whole run.
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return usagef("--plot %q: directory %q does not exist", path, dir)
	}
	f, err := os.CreateTemp(dir, ".pubsubflow-plot-*")
	if err != nil {
		return usagef("--plot %q: cannot write in %q: %v", path, dir, err)
	}
	name := f.Name()
	_ = f.Close()
	_ = os.Remove(name)
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return usagef("--plot %q is a directory", path)
	}
	return nil
}

// writePlot draws outstanding, buffered, processing and redeliveries over
// time, one panel per run, to path (.svg or .png).
func writePlot(path string, runs []runResult) error {
	var panels [][]*plot.Plot
	for _, r := range runs {
		p, err := runPlot(r)
		if err != nil {
			return err
		}
		panels = append(panels, []*plot.Plot{p})
	}
	if len(panels) == 0 {
		return errors.New("plot: no run to draw")
	}
	h := plotPanelHeight * vg.Length(len(panels))
	var (
		canvas vg.CanvasSizer
		writer io.WriterTo
	)
	if strings.EqualFold(filepath.Ext(path), ".png") {
		c := vgimg.New(plotWidth, h)
		canvas, writer = c, vgimg.PngCanvas{Canvas: c}
	} else {
		c := vgsvg.New(plotWidth, h)
		canvas, writer = c, c
	}
	dc := draw.New(canvas)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadX: vg.Millimeter, PadY: 4 * vg.Millimeter,
		PadTop: 2 * vg.Millimeter, PadBottom: 2 * vg.Millimeter, PadLeft: 2 * vg.Millimeter, PadRight: 2 * vg.Millimeter}
	cs := plot.Align(panels, tiles, dc)
	for i := range panels {
		panels[i][0].Draw(cs[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if _, err := writer.WriteTo(f); err != nil {
		_ = f.Close()
		return fmt.Errorf("plot: writing %s: %w", path, err)
	}
	return f.Close()
}

func runPlot(r runResult) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s: %d messages, %d redelivered, wall %s", r.name, r.messages, r.redelivered(), seconds(r.wall))
	p.X.Label.Text = "seconds"
	p.Y.Label.Text = "messages"
	p.Y.Min = 0
	p.Y.Tick.Marker = intTicks{}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	var top float64
	for _, s := range plotSeries {
		if s.serverOnly && r.server == nil {
			continue
		}
		xys := plotter.XYs{{}} // a run that failed at once still gets an axis
		if len(r.samples) > 0 {
			xys = make(plotter.XYs, len(r.samples))
		}
		for i, sm := range r.samples {
			xys[i] = plotter.XY{X: sm.at.Seconds(), Y: float64(s.value(sm))}
			top = max(top, xys[i].Y)
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, fmt.Errorf("plot: %w", err)
		}
		l.Color = s.color
		l.Width = vg.Points(1.5)
		if s.serverOnly {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	// Head room, so that the legend (top right) does not cover the data.
	p.Y.Max = max(1, top) * 1.6
	return p, nil
}

// intTicks are the default ticks labelled as whole numbers.
type intTicks struct{}

func (intTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', 0, 64)
		}
	}
	return ts
}

package harness

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"

	"github.com/xpuinject/xpuinject/inject/outdir"
)

// A small raster chart renderer: grouped bars with a linear or log axis, a legend and
// value labels. Enough for the two plots a report needs, without a plotting stack.

var (
	colStock    = color.RGBA{0x8a, 0x94, 0xa6, 0xff} // grey: what the user has today
	colInjected = color.RGBA{0x1f, 0x6f, 0xd1, 0xff} // blue: xpuinject
	colAxis     = color.RGBA{0x33, 0x33, 0x33, 0xff}
	colGrid     = color.RGBA{0xe4, 0xe7, 0xeb, 0xff}
	colText     = color.RGBA{0x11, 0x11, 0x11, 0xff}
)

// Series is one bar colour across the groups.
type Series struct {
	Name   string
	Color  color.RGBA
	Values []float64
}

// BarChart describes a grouped bar chart.
type BarChart struct {
	Title, YLabel string
	Groups        []string
	Series        []Series
	LogY          bool
	// Notes are written above each group (e.g. "0.82x"); may be nil.
	Notes []string
}

const (
	chartW, chartH = 960, 480
	marginL        = 90
	marginR        = 20
	marginT        = 60
	marginB        = 90
)

// Render draws the chart.
func (c *BarChart) Render() *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, chartW, chartH))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	text(img, marginL, 28, c.Title, colText)
	text(img, 8, marginT-10, c.YLabel, colText)

	lo, hi := c.bounds()
	plotW, plotH := chartW-marginL-marginR, chartH-marginT-marginB
	y := func(v float64) int {
		var t float64
		if c.LogY {
			t = (math.Log10(v) - math.Log10(lo)) / (math.Log10(hi) - math.Log10(lo))
		} else {
			t = (v - lo) / (hi - lo)
		}
		t = math.Max(0, math.Min(1, t))
		return marginT + plotH - int(t*float64(plotH))
	}
	// grid + tick labels
	for _, tv := range c.ticks(lo, hi) {
		yy := y(tv)
		hline(img, marginL, marginL+plotW, yy, colGrid)
		lbl := tickLabel(tv)
		text(img, marginL-8-textWidth(lbl), yy+4, lbl, colAxis)
	}
	vline(img, marginL, marginT, marginT+plotH, colAxis)
	hline(img, marginL, marginL+plotW, marginT+plotH, colAxis)

	ng, ns := len(c.Groups), len(c.Series)
	if ng == 0 || ns == 0 {
		return img
	}
	groupW := float64(plotW) / float64(ng)
	barW := int(groupW * 0.7 / float64(ns))
	if barW < 2 {
		barW = 2
	}
	for g := 0; g < ng; g++ {
		x0 := marginL + int(groupW*float64(g)+groupW*0.15)
		for s, ser := range c.Series {
			if g >= len(ser.Values) {
				continue
			}
			v := ser.Values[g]
			if math.IsNaN(v) || (c.LogY && v <= 0) {
				continue
			}
			bx := x0 + s*barW
			fill(img, bx, y(v), bx+barW-1, marginT+plotH, ser.Color)
		}
		lbl := c.Groups[g]
		cx := marginL + int(groupW*float64(g)+groupW/2)
		// long labels (layer names) go on two lines
		lines := splitLabel(lbl, int(groupW)/7)
		for i, ln := range lines {
			text(img, cx-textWidth(ln)/2, marginT+plotH+16+14*i, ln, colAxis)
		}
		if c.Notes != nil && g < len(c.Notes) && c.Notes[g] != "" {
			top := marginT + plotH
			for _, ser := range c.Series {
				if g < len(ser.Values) && !math.IsNaN(ser.Values[g]) && (!c.LogY || ser.Values[g] > 0) {
					top = min(top, y(ser.Values[g]))
				}
			}
			text(img, cx-textWidth(c.Notes[g])/2, top-6, c.Notes[g], colText)
		}
	}
	// legend
	lx := chartW - marginR - 10
	for i := len(c.Series) - 1; i >= 0; i-- {
		s := c.Series[i]
		lx -= textWidth(s.Name) + 26
		fill(img, lx, 40, lx+12, 52, s.Color)
		text(img, lx+18, 51, s.Name, colText)
	}
	return img
}

func (c *BarChart) bounds() (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for _, v := range s.Values {
			if math.IsNaN(v) || math.IsInf(v, 0) || (c.LogY && v <= 0) {
				continue
			}
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
	}
	if math.IsInf(lo, 1) {
		return 0.1, 1
	}
	if c.LogY {
		lo = math.Pow(10, math.Floor(math.Log10(lo)))
		hi = math.Pow(10, math.Ceil(math.Log10(hi)))
		if hi <= lo {
			hi = lo * 10
		}
		return lo, hi
	}
	lo = 0
	hi *= 1.15
	if hi == 0 {
		hi = 1
	}
	return lo, hi
}

func (c *BarChart) ticks(lo, hi float64) []float64 {
	var out []float64
	if c.LogY {
		decades := math.Log10(hi / lo)
		for v := lo; v <= hi*1.0001; v *= 10 {
			out = append(out, v)
			if decades <= 3 { // few decades: 2 and 5 ticks too
				for _, m := range []float64{2, 5} {
					if v*m < hi {
						out = append(out, v*m)
					}
				}
			}
		}
		return out
	}
	step := niceStep(hi / 5)
	for v := 0.0; v <= hi; v += step {
		out = append(out, v)
	}
	return out
}

func niceStep(x float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

func tickLabel(v float64) string {
	if v != 0 && (math.Abs(v) < 1e-2 || math.Abs(v) >= 1e4) {
		return fmt.Sprintf("%.0e", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
}

func splitLabel(s string, maxChars int) []string {
	if maxChars < 4 || len(s) <= maxChars {
		return []string{s}
	}
	if i := strings.LastIndex(s[:maxChars], "."); i > 0 {
		return []string{s[:i], s[i:]}
	}
	return []string{s[:maxChars], s[maxChars:]}
}

var face = basicfont.Face7x13

func text(img draw.Image, x, y int, s string, c color.Color) {
	d := &font.Drawer{Dst: img, Src: image.NewUniform(c), Face: face, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func textWidth(s string) int { return font.MeasureString(face, s).Ceil() }

func fill(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	draw.Draw(img, image.Rect(x0, y0, x1+1, y1+1), image.NewUniform(c), image.Point{}, draw.Src)
}

func hline(img *image.RGBA, x0, x1, y int, c color.Color) { fill(img, x0, y, x1, y, c) }
func vline(img *image.RGBA, x, y0, y1 int, c color.Color) { fill(img, x, y0, x, y1, c) }

func writePNG(tx *outdir.Tx, name string, img image.Image) error {
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		return fmt.Errorf("harness: %s: %w", name, err)
	}
	if err := tx.WriteFile(name, b.Bytes()); err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	return nil
}

// LayerErrorChart plots each layer's mean relative error against the oracle, stock beside
// injected, on a log axis: a layout bug shows as one bar jumping by orders of magnitude.
func LayerErrorChart(r *Result) image.Image {
	c := &BarChart{
		Title:  fmt.Sprintf("%s: per-layer output error vs fp32 (mean relative, log scale)", r.Model.Arch),
		YLabel: "mean rel err",
		LogY:   true,
		Series: []Series{{Name: "stock " + r.HalfDtype(), Color: colStock}, {Name: "xpuinject " + r.HalfDtype(), Color: colInjected}},
	}
	for _, l := range r.Layers {
		c.Groups = append(c.Groups, strings.TrimPrefix(l.Name, "model."))
		c.Series[0].Values = append(c.Series[0].Values, float64(l.Stock.MeanRel))
		c.Series[1].Values = append(c.Series[1].Values, float64(l.Injected.MeanRel))
	}
	return c.Render()
}

// pathColors: stock paths in greys (darkest: the anchor to beat), injected in blues.
var pathColors = map[string]color.RGBA{
	PathStockEager:    {0xc4, 0xc9, 0xd2, 0xff},
	PathStockCompiled: {0x3d, 0x44, 0x4f, 0xff},
	PathStockBest:     {0x1b, 0x1f, 0x26, 0xff},
	PathStockGraph:    colStock,
	PathInjectedGraph: colInjected,
	PathInjectedEager: {0x9c, 0xc3, 0xf0, 0xff},
}

// LatencyChart plots each measured latency point on every measured path, with the headline
// ratio (the first of LatencyRatios measured, named in the title) written over each group.
func LatencyChart(r *Result) image.Image {
	var all []LatencyRow
	all = append(all, r.Latency.Prefill...)
	all = append(all, r.Latency.Decode...)
	all = append(all, r.Latency.Forward...)
	paths := measuredPaths(r.Latency.Paths, all)
	ratios := measuredRatios(paths)
	head := "no ratio"
	if len(ratios) > 0 {
		head = PathLabel(ratios[0][0]) + " / " + PathLabel(ratios[0][1])
	}
	c := &BarChart{
		Title:  fmt.Sprintf("%s on %s: latency (median ms; label = %s)", r.Model.Arch, r.Device.Name, head),
		YLabel: "ms",
	}
	for _, p := range paths {
		c.Series = append(c.Series, Series{Name: PathLabel(p), Color: pathColors[p]})
	}
	add := func(label string, row LatencyRow) {
		c.Groups = append(c.Groups, label)
		for i, p := range paths {
			v, _ := row.Value(p)
			c.Series[i].Values = append(c.Series[i].Values, v)
		}
		note := ""
		if len(ratios) > 0 {
			// basicfont has no "×": plain x in the picture
			note = strings.ReplaceAll(rowRatio(row, ratios[0]), "×", "x")
		}
		c.Notes = append(c.Notes, note)
	}
	for _, x := range r.Latency.Prefill {
		add(fmt.Sprintf("prefill %d", x.Tokens), x)
	}
	for _, x := range r.Latency.Decode {
		add(fmt.Sprintf("decode b%d", x.Batch), x)
	}
	for _, x := range r.Latency.Forward {
		add(fmt.Sprintf("batch %d", x.Batch), x)
	}
	// decode is far faster than a 2k prefill: a log axis keeps both readable
	c.LogY = true
	return c.Render()
}

package main

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// plot is a line chart written as hand-made SVG: axes with ticks, series as
// polylines, shaded bands along x and labelled marks.
type plot struct {
	Title, XLabel, YLabel string
	Series                []series
	Bands                 []band
	Marks                 []mark
	// XMin and XMax are the x axis range; YMax the top of the y axis, which
	// starts at 0. Zero values mean: fit the data.
	XMin, XMax, YMax float64
	// LogX puts x on a log-2 axis (x above 0), ticked at powers of two.
	LogX bool
}

type series struct {
	Name, Color string
	X, Y        []float64
	Dots        bool // mark each point
	Dash        bool // a dashed line: a limit, not data
}

// band shades x from X0 to X1.
type band struct {
	X0, X1      float64
	Label, Fill string
}

// mark is a labelled point.
type mark struct {
	X, Y  float64
	Label string
}

// The canvas and the plot area within it, in pixels.
const (
	svgW, svgH                             = 900, 500
	padLeft, padRight, padTop, padBottom   = 70, 30, 50, 55
	plotW, plotH                           = svgW - padLeft - padRight, svgH - padTop - padBottom
	fontFamily                             = "sans-serif"
	axisColor, gridColor, textColor, mkClr = "#333", "#ddd", "#222", "#c00"
)

func (p *plot) render(out io.Writer) error {
	w := bufio.NewWriter(out)
	xmin, xmax, ymax := p.XMin, p.XMax, p.YMax
	if xmin == 0 && xmax == 0 {
		xmin, xmax = math.Inf(1), math.Inf(-1)
		for _, s := range p.Series {
			for _, x := range s.X {
				xmin, xmax = min(xmin, x), max(xmax, x)
			}
		}
	}
	if ymax == 0 {
		for _, s := range p.Series {
			for _, y := range s.Y {
				ymax = max(ymax, y)
			}
		}
	}
	if !(ymax > 0) {
		ymax = 1
	}
	if !(xmax > xmin) { // also no data
		xmin, xmax = xmin-1, xmin+1
		if math.IsInf(xmin, 0) {
			xmin, xmax = 0, 1
		}
	}
	// The y axis ends at a tick above the data, with some headroom; the x
	// axis spans the data, with the ticks inside it.
	yticks, ystep := ticks(0, ymax*1.05)
	ymax = yticks[len(yticks)-1]
	var xticks []float64
	all, xstep := ticks(xmin, xmax)
	px := func(x float64) float64 { return padLeft + (x-xmin)/(xmax-xmin)*plotW }
	if p.LogX {
		xmin = max(xmin, 1e-9)
		all, xstep = nil, 1
		for t := math.Exp2(math.Floor(math.Log2(xmin))); t <= xmax; t *= 2 {
			all = append(all, t)
		}
		lo, hi := math.Log2(xmin), math.Log2(xmax)
		px = func(x float64) float64 { return padLeft + (math.Log2(max(x, xmin))-lo)/(hi-lo)*plotW }
	}
	for _, x := range all {
		if x >= xmin && x <= xmax {
			xticks = append(xticks, x)
		}
	}
	py := func(y float64) float64 { return padTop + plotH - y/ymax*plotH }

	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="%s" font-size="12">`+"\n",
		svgW, svgH, svgW, svgH, fontFamily)
	fmt.Fprintf(w, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgW, svgH)
	// A long title (a step with its allocator options, say) gets a smaller
	// font, so that it stays inside the picture at about 0.55 em a glyph.
	title := min(16, float64(svgW-20)/(0.55*float64(utf8.RuneCountInString(p.Title))))
	fmt.Fprintf(w, `<text x="%d" y="25" font-size="%s" text-anchor="middle" fill="%s">%s</text>`+"\n", svgW/2, f1(title), textColor, esc(p.Title))
	// Bands: shaded, a dashed line where each but the first starts, and the
	// label above the plot area where it fits.
	for _, b := range p.Bands {
		fmt.Fprintf(w, `<rect x="%s" y="%d" width="%s" height="%d" fill="%s"/>`+"\n", f1(px(b.X0)), padTop, f1(px(b.X1)-px(b.X0)), plotH, b.Fill)
	}
	for i, b := range p.Bands {
		x0, x1 := px(b.X0), px(b.X1)
		if i > 0 {
			fmt.Fprintf(w, `<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="%s" stroke-dasharray="4 3"/>`+"\n", f1(x0), padTop, f1(x0), padTop+plotH, axisColor)
		}
		if x1-x0 >= 7*float64(len(b.Label)) {
			fmt.Fprintf(w, `<text x="%s" y="%d" text-anchor="middle" fill="%s">%s</text>`+"\n", f1((x0+x1)/2), padTop-6, textColor, esc(b.Label))
		} else { // too narrow: upwards from the bottom, after the dashed line
			x, y := f1(x0+12), strconv.Itoa(padTop+plotH-6)
			fmt.Fprintf(w, `<text x="%s" y="%s" fill="%s" transform="rotate(-90 %s %s)">%s</text>`+"\n", x, y, textColor, x, y, esc(b.Label))
		}
	}
	// Grid, ticks and tick labels.
	for _, y := range yticks {
		fmt.Fprintf(w, `<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="%s"/>`+"\n", padLeft, f1(py(y)), padLeft+plotW, f1(py(y)), gridColor)
		fmt.Fprintf(w, `<text x="%d" y="%s" text-anchor="end" fill="%s">%s</text>`+"\n", padLeft-6, f1(py(y)+4), textColor, tickLabel(y, ystep))
	}
	for _, x := range xticks {
		fmt.Fprintf(w, `<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="%s"/>`+"\n", f1(px(x)), padTop+plotH, f1(px(x)), padTop+plotH+5, axisColor)
		fmt.Fprintf(w, `<text x="%s" y="%d" text-anchor="middle" fill="%s">%s</text>`+"\n", f1(px(x)), padTop+plotH+19, textColor, tickLabel(x, xstep))
	}
	fmt.Fprintf(w, `<polyline points="%d,%d %d,%d %d,%d" fill="none" stroke="%s"/>`+"\n",
		padLeft, padTop, padLeft, padTop+plotH, padLeft+plotW, padTop+plotH, axisColor)
	fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="middle" fill="%s">%s</text>`+"\n", padLeft+plotW/2, svgH-12, textColor, esc(p.XLabel))
	fmt.Fprintf(w, `<text x="18" y="%d" text-anchor="middle" fill="%s" transform="rotate(-90 18 %d)">%s</text>`+"\n",
		padTop+plotH/2, textColor, padTop+plotH/2, esc(p.YLabel))
	// Series.
	for _, s := range p.Series {
		xs, ys := thin(s.X, s.Y, func(x float64) int { return int(px(x)) })
		var pts strings.Builder
		for i := range xs {
			if i > 0 {
				pts.WriteByte(' ')
			}
			pts.WriteString(f1(px(xs[i])) + "," + f1(py(ys[i])))
		}
		dash := ""
		if s.Dash {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(w, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", pts.String(), s.Color, dash)
		if s.Dots {
			for i := range s.X {
				fmt.Fprintf(w, `<circle cx="%s" cy="%s" r="3.5" fill="%s"/>`+"\n", f1(px(s.X[i])), f1(py(s.Y[i])), s.Color)
			}
		}
	}
	// Legend, top left inside the plot area.
	if len(p.Series) > 1 {
		longest := 0
		for _, s := range p.Series {
			longest = max(longest, utf8.RuneCountInString(s.Name))
		}
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="%d" height="%d" fill="white" fill-opacity="0.85" stroke="%s"/>`+"\n",
			padLeft+4, padTop+18, max(110, 44+7*longest), 18*len(p.Series)+8, gridColor)
		for i, s := range p.Series {
			y := padTop + 32 + 18*i
			dash := ""
			if s.Dash {
				dash = ` stroke-dasharray="6 4"`
			}
			fmt.Fprintf(w, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", padLeft+10, y-4, padLeft+30, y-4, s.Color, dash)
			fmt.Fprintf(w, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", padLeft+36, y, textColor, esc(s.Name))
		}
	}
	for _, m := range p.Marks {
		x, y := px(m.X), py(m.Y)
		anchor, dx := "start", 8.0
		if x > padLeft+plotW/2 {
			anchor, dx = "end", -8
		}
		fmt.Fprintf(w, `<circle cx="%s" cy="%s" r="5" fill="none" stroke="%s" stroke-width="2"/>`+"\n", f1(x), f1(y), mkClr)
		fmt.Fprintf(w, `<text x="%s" y="%s" text-anchor="%s" fill="%s">%s</text>`+"\n", f1(x+dx), f1(max(y-8, padTop+28)), anchor, mkClr, esc(m.Label))
	}
	fmt.Fprint(w, "</svg>\n")
	return w.Flush()
}

// ticks returns about five to ten round tick values covering lo..hi, and
// their step (1, 2 or 5 times a power of ten).
func ticks(lo, hi float64) ([]float64, float64) {
	span := hi - lo
	if !(span > 0) {
		span = 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(span)))
	step := mag
	for _, m := range []float64{0.1, 0.2, 0.5, 1, 2, 5} {
		if span/(m*mag) <= 10 {
			step = m * mag
			break
		}
	}
	var out []float64
	for i := math.Floor(lo / step); ; i++ {
		v := i * step
		out = append(out, v)
		if v >= hi {
			return out, step
		}
	}
}

// tickLabel formats a tick value with as many decimals as its step needs.
func tickLabel(v, step float64) string {
	dec := max(0, int(-math.Floor(math.Log10(step)+1e-9)))
	return strconv.FormatFloat(v, 'f', dec, 64)
}

// thin drops points that fall into the same pixel column, keeping in each
// column the first, lowest, highest and last point in their order, so that a
// long series keeps its shape (and its peak) in a small file.
func thin(xs, ys []float64, col func(float64) int) ([]float64, []float64) {
	if len(xs) <= 2*plotW {
		return xs, ys
	}
	var ox, oy []float64
	for i := 0; i < len(xs); {
		j, lo, hi := i, i, i
		for j < len(xs) && col(xs[j]) == col(xs[i]) {
			if ys[j] < ys[lo] {
				lo = j
			}
			if ys[j] > ys[hi] {
				hi = j
			}
			j++
		}
		last := -1
		for _, k := range []int{i, min(lo, hi), max(lo, hi), j - 1} {
			if k != last {
				ox, oy = append(ox, xs[k]), append(oy, ys[k])
				last = k
			}
		}
		i = j
	}
	return ox, oy
}

func f1(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) }

// esc escapes text for XML.
func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

// gibf is bytes in GiB, for plots.
func gibf(b int64) float64 { return float64(b) / (1 << 30) }

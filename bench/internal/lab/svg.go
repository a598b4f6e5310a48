package lab

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"strings"
)

// Charts are plain SVG text: no dependency, readable in a browser and on
// GitHub, embedded by report.md.

// palette colours the series of a chart, in order.
var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

// BarSeries is one series of a grouped bar chart: a value per group
// (NaN: none) and optionally the low and high of its range, drawn as a
// whisker.
type BarSeries struct {
	Name           string
	Values, Lo, Hi []float64
}

// BarChart is a grouped bar chart.
type BarChart struct {
	Title, Unit string
	Groups      []string
	Series      []BarSeries
	// Log draws the value axis in log scale (for figures that differ by
	// orders of magnitude).
	Log bool
}

// LinePoint is one point of a line.
type LinePoint struct{ X, Y float64 }

// Line is one series of a line chart.
type Line struct {
	Name   string
	Points []LinePoint
}

// LineChart is a line chart with numeric axes.
type LineChart struct {
	Title, XLabel, YLabel string
	Lines                 []Line
	// XTicks, if set, names positions of the x axis (e.g. percentiles);
	// otherwise ticks are numeric.
	XTicks map[float64]string
	// LogY draws the y axis in log scale.
	LogY bool
	// HLine, if above zero, draws a dashed horizontal line at that y
	// (a limit), labelled HLineLabel.
	HLine      float64
	HLineLabel string
}

const (
	svgW, svgH                         = 760, 380
	padL, padR, padT, padB             = 70, 180, 40, 60
	plotW, plotH                       = svgW - padL - padR, svgH - padT - padB
	svgFont                            = `font-family="sans-serif" font-size="12"`
	svgHead                            = `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">` + "\n"
	svgBackground                      = `<rect width="100%" height="100%" fill="white"/>` + "\n"
	svgTitle                           = `<text x="%d" y="22" font-family="sans-serif" font-size="15" font-weight="bold">%s</text>` + "\n"
	legendX, legendY, legendStep, swat = svgW - padR + 15, padT + 10, 20, 12
)

func esc(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// scale maps values to the plot's vertical pixels.
type scale struct {
	lo, hi float64
	log    bool
}

func newScale(vals []float64, log bool) scale {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vals {
		if math.IsNaN(v) || math.IsInf(v, 0) || (log && v <= 0) {
			continue
		}
		lo, hi = min(lo, v), max(hi, v)
	}
	if log {
		if math.IsInf(lo, 0) {
			// nothing to draw: one decade
			return scale{lo: 1, hi: 10, log: true}
		}
		lo = math.Pow(10, math.Floor(math.Log10(lo)))
		hi = math.Pow(10, math.Ceil(math.Log10(hi)))
		if hi <= lo {
			hi = lo * 10
		}
		return scale{lo: lo, hi: hi, log: true}
	}
	if hi <= 0 { // nothing above zero to draw (hi is -Inf without values)
		hi = 1
	}
	return scale{lo: 0, hi: niceCeil(hi * 1.05)}
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// frac is v's position on the axis, 0 at the bottom and 1 at the top.
func (s scale) frac(v float64) float64 {
	if s.log {
		if v <= 0 {
			return 0
		}
		return (math.Log10(v) - math.Log10(s.lo)) / (math.Log10(s.hi) - math.Log10(s.lo))
	}
	return (v - s.lo) / (s.hi - s.lo)
}

func (s scale) y(v float64) float64 { return padT + plotH*(1-math.Max(0, math.Min(1, s.frac(v)))) }

func (s scale) ticks() []float64 {
	var out []float64
	if s.log {
		for v := s.lo; v <= s.hi*1.0001; v *= 10 {
			out = append(out, v)
		}
		return out
	}
	step := s.hi / 5
	for i := 0; i <= 5; i++ {
		out = append(out, step*float64(i))
	}
	return out
}

func fmtTick(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 1000:
		return strings.TrimSuffix(fmt.Sprintf("%.0f", v), ".0")
	case math.Abs(v) >= 1:
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.4f", v), "0"), ".")
}

func yAxis(b *strings.Builder, s scale, label string) {
	for _, v := range s.ticks() {
		y := s.y(v)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", padL, y, padL+plotW, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" %s text-anchor="end">%s</text>`+"\n", padL-6, y+4, svgFont, esc(fmtTick(v)))
	}
	fmt.Fprintf(b, `<text transform="translate(16 %d) rotate(-90)" %s text-anchor="middle">%s</text>`+"\n", padT+plotH/2, svgFont, esc(label))
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", padL, padT, padL, padT+plotH)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", padL, padT+plotH, padL+plotW, padT+plotH)
}

func legend(b *strings.Builder, names []string) {
	for i, n := range names {
		y := legendY + i*legendStep
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="%s"/>`+"\n", legendX, y, swat, swat, palette[i%len(palette)])
		fmt.Fprintf(b, `<text x="%d" y="%d" %s>%s</text>`+"\n", legendX+swat+6, y+swat-2, svgFont, esc(n))
	}
}

// SVG renders the chart.
func (c BarChart) SVG() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, svgHead, svgW, svgH, svgW, svgH)
	b.WriteString(svgBackground)
	fmt.Fprintf(&b, svgTitle, padL, esc(c.Title))
	var all []float64
	for _, s := range c.Series {
		all = append(append(append(all, s.Values...), s.Hi...), s.Lo...)
	}
	sc := newScale(all, c.Log)
	yAxis(&b, sc, c.Unit)
	groupW := float64(plotW) / math.Max(1, float64(len(c.Groups)))
	barW := groupW * 0.8 / math.Max(1, float64(len(c.Series)))
	base := sc.y(sc.lo)
	for gi, g := range c.Groups {
		x0 := padL + groupW*float64(gi) + groupW*0.1
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" %s text-anchor="middle">%s</text>`+"\n", x0+groupW*0.4, padT+plotH+18, svgFont, esc(g))
		for si, s := range c.Series {
			if gi >= len(s.Values) || math.IsNaN(s.Values[gi]) {
				continue
			}
			v := s.Values[gi]
			x := x0 + barW*float64(si)
			y := sc.y(v)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %s %s</title></rect>`+"\n",
				x, y, barW*0.9, math.Max(0, base-y), palette[si%len(palette)], esc(s.Name), esc(fmtTick(v)), esc(c.Unit))
			if gi < len(s.Lo) && gi < len(s.Hi) && !math.IsNaN(s.Lo[gi]) && !math.IsNaN(s.Hi[gi]) && s.Hi[gi] > s.Lo[gi] {
				cx := x + barW*0.45
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", cx, sc.y(s.Lo[gi]), cx, sc.y(s.Hi[gi]))
			}
		}
	}
	names := make([]string, len(c.Series))
	for i, s := range c.Series {
		names[i] = s.Name
	}
	legend(&b, names)
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// SVG renders the chart.
func (c LineChart) SVG() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, svgHead, svgW, svgH, svgW, svgH)
	b.WriteString(svgBackground)
	fmt.Fprintf(&b, svgTitle, padL, esc(c.Title))
	var ys []float64
	xlo, xhi := math.Inf(1), math.Inf(-1)
	for _, l := range c.Lines {
		for _, p := range l.Points {
			ys = append(ys, p.Y)
			xlo, xhi = min(xlo, p.X), max(xhi, p.X)
		}
	}
	if c.HLine > 0 {
		ys = append(ys, c.HLine)
	}
	if math.IsInf(xlo, 0) {
		xlo, xhi = 0, 1
	}
	if xhi <= xlo {
		xhi = xlo + 1
	}
	for x := range c.XTicks {
		xlo, xhi = min(xlo, x), max(xhi, x)
	}
	sc := newScale(ys, c.LogY)
	yAxis(&b, sc, c.YLabel)
	px := func(x float64) float64 { return padL + plotW*(x-xlo)/(xhi-xlo) }
	if c.XTicks != nil {
		for x, name := range c.XTicks {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" %s text-anchor="middle">%s</text>`+"\n", px(x), padT+plotH+18, svgFont, esc(name))
		}
	} else {
		for i := 0; i <= 5; i++ {
			x := xlo + (xhi-xlo)*float64(i)/5
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" %s text-anchor="middle">%s</text>`+"\n", px(x), padT+plotH+18, svgFont, esc(fmtTick(x)))
		}
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" %s text-anchor="middle">%s</text>`+"\n", padL+plotW/2, svgH-14, svgFont, esc(c.XLabel))
	if c.HLine > 0 {
		y := sc.y(c.HLine)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#d62728" stroke-dasharray="6 4"/>`+"\n", padL, y, padL+plotW, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" %s fill="#d62728" text-anchor="end">%s</text>`+"\n", padL+plotW-4, y-4, svgFont, esc(c.HLineLabel))
	}
	names := make([]string, len(c.Lines))
	for i, l := range c.Lines {
		names[i] = l.Name
		col := palette[i%len(palette)]
		var pts []string
		for _, p := range l.Points {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(p.X), sc.y(p.Y)))
		}
		if len(pts) > 0 {
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), col)
		}
		for _, p := range l.Points {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s: %s, %s</title></circle>`+"\n",
				px(p.X), sc.y(p.Y), col, esc(l.Name), esc(fmtTick(p.X)), esc(fmtTick(p.Y)))
		}
	}
	legend(&b, names)
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

package fragmentation

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Series is one strategy's served demand over a replay.
type Series struct {
	Label  string
	Points []Point
}

// lineStyle gives the i-th line a colour and, past the palette's length, a dash pattern, so
// that ten strategies stay apart in one plot.
func lineStyle(i int) draw.LineStyle {
	n := len(plotutil.DefaultColors)
	return draw.LineStyle{Color: plotutil.Color(i), Width: vg.Points(1.5), Dashes: plotutil.Dashes(i / n)}
}

// PlotServed writes an SVG of served demand over simulated time, one line per series, with a
// vertical rule where the measured window starts (measureFrom seconds from the first
// arrival), so the warm-up that the tables leave out is visible as such.
func PlotServed(path, title string, series []Series, measureFrom int64) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "simulated time (minutes from the first arrival, arrivals compressed)"
	p.Y.Label.Text = "served GPU demand (% of all compute slices)"
	p.Y.Min, p.Y.Max = 0, 100
	p.Add(plotter.NewGrid())
	maxT := int64(1)
	for i, s := range series {
		xy := make(plotter.XYs, len(s.Points))
		for k, pt := range s.Points {
			xy[k] = plotter.XY{X: float64(pt.T) / 60, Y: pt.Served}
			maxT = max(maxT, pt.T)
		}
		if len(xy) == 0 {
			continue
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return fmt.Errorf("plot %s: %w", s.Label, err)
		}
		l.LineStyle = lineStyle(i)
		p.Add(l)
		p.Legend.Add(s.Label, l)
	}
	if measureFrom > 0 {
		rule, err := plotter.NewLine(plotter.XYs{{X: float64(measureFrom) / 60, Y: 0}, {X: float64(measureFrom) / 60, Y: 100}})
		if err != nil {
			return fmt.Errorf("plot the window's start: %w", err)
		}
		rule.LineStyle = draw.LineStyle{Color: color.Gray{Y: 128}, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(4), vg.Points(4)}}
		p.Add(rule)
		p.Legend.Add("measured window starts", rule)
	}
	p.X.Min, p.X.Max = 0, float64(maxT)/60
	// Served demand starts from zero during the warm-up, so the upper left corner is empty.
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	if err := p.Save(10*vg.Inch, 6*vg.Inch, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// SweepLine is one strategy's served demand (%) at each budget of the sweep.
type SweepLine struct {
	Label  string
	Served []float64
}

// Ceiling is a strategy that no budget moves, drawn as a horizontal line.
type Ceiling struct {
	Label  string
	Served float64
}

// PlotSweep writes an SVG of served demand against the maxDisruptedNodes budget. The budgets
// are evenly spaced and labelled as given (counts and percentages alike), the lines are the
// gpupool strategies and the horizontal lines the fluid ceilings.
func PlotSweep(path, title string, budgets []string, lines []SweepLine, ceilings []Ceiling) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "maxDisruptedNodes"
	p.Y.Label.Text = "served GPU demand (% of all compute slices)"
	p.Add(plotter.NewGrid())
	var ticks plot.ConstantTicks
	for i, b := range budgets {
		ticks = append(ticks, plot.Tick{Value: float64(i), Label: b})
	}
	p.X.Tick.Marker = ticks
	p.X.Min, p.X.Max = -0.25, float64(len(budgets)-1)+0.25
	lo, hi := 100.0, 0.0
	for i, ln := range lines {
		if len(ln.Served) != len(budgets) {
			return fmt.Errorf("plot %s: %d values for %d budgets", ln.Label, len(ln.Served), len(budgets))
		}
		xy := make(plotter.XYs, len(ln.Served))
		for k, v := range ln.Served {
			xy[k] = plotter.XY{X: float64(k), Y: v}
			lo, hi = min(lo, v), max(hi, v)
		}
		l, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			return fmt.Errorf("plot %s: %w", ln.Label, err)
		}
		l.LineStyle = lineStyle(i)
		pts.Color = l.Color
		pts.Shape = plotutil.Shape(i)
		p.Add(l, pts)
		p.Legend.Add(ln.Label, l, pts)
	}
	for i, c := range ceilings {
		l, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: c.Served}, {X: p.X.Max, Y: c.Served}})
		if err != nil {
			return fmt.Errorf("plot %s: %w", c.Label, err)
		}
		l.LineStyle = draw.LineStyle{Color: color.Gray{Y: uint8(60 + 60*i)}, Width: vg.Points(1.5), Dashes: plotutil.Dashes(i + 1)}
		p.Add(l)
		p.Legend.Add(c.Label, l)
		lo, hi = min(lo, c.Served), max(hi, c.Served)
	}
	// Zoom on the band the values span: the differences are a few points.
	p.Y.Min, p.Y.Max = max(0, lo-5), min(100, hi+2)
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	if err := p.Save(8*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

package simulate

import (
	"encoding/csv"
	"fmt"
	"html"
	"io"
	"strconv"
	"strings"
	"time"
)

// WriteCSV writes one row per lane and bin: t_seconds (the bin's start),
// lane, admitted, denied, remaining (at the bin's end), max_delay_seconds
// and in_debt (1 when the bucket was in debt at the bin's end, else 0),
// after a header row.
func (r *Result) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"t_seconds", "lane", "admitted", "denied", "remaining", "max_delay_seconds", "in_debt"})
	for _, l := range r.Lanes {
		for _, b := range l.Bins {
			cw.Write([]string{
				strconv.FormatFloat(b.Start.Seconds(), 'f', -1, 64), l.Name,
				strconv.Itoa(b.Admitted), strconv.Itoa(b.Denied),
				strconv.FormatInt(b.Remaining, 10),
				strconv.FormatFloat(b.MaxDelay.Seconds(), 'f', -1, 64),
				strconv.Itoa(boolInt(b.InDebt)),
			})
		}
	}
	cw.Flush()
	return cw.Error()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Chart colours, shared by the SVG and the console's legend.
const (
	colorAdmitted  = "#2e7d32"
	colorDenied    = "#c62828"
	colorRemaining = "#1565c0"
	colorDelay     = "#ef6c00"
	colorDebt      = "#fbe9e7"
)

// The chart's geometry, in pixels.
const (
	chartWidth   = 960
	chartLeft    = 56
	chartRight   = 16
	chartPanelH  = 150
	chartGap     = 56
	chartTop     = 50
	chartPlotW   = chartWidth - chartLeft - chartRight
	chartAxisPad = 28
)

// SVG draws the result as one panel per lane, stacked on a shared time
// axis: admitted (green) and denied (red) requests per bin as stacked bars,
// what the bucket holds at each bin's end as a blue line (scaled to the
// lane's capacity) and, for a queue, its longest delay per bin as an orange
// line, and the intervals a budget ends in debt shaded pink. Each panel's
// title gives the lane's totals. The drawing is a
// self-contained SVG document with no scripts or external references.
func (r *Result) SVG() string {
	height := chartTop + len(r.Lanes)*(chartPanelH+chartGap) + chartAxisPad
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12" role="img">`, chartWidth, height, chartWidth, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#fff"/>`)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="14" font-weight="bold">%d requests over %s</text>`, chartLeft, r.Arrivals, fmtDur(r.Duration))
	legend := []struct{ color, label string }{{colorAdmitted, "admitted"}, {colorDenied, "denied"}, {colorRemaining, "remaining (of capacity)"}, {colorDelay, "queue delay"}, {colorDebt, "in debt"}}
	x := chartLeft + 250
	for _, l := range legend {
		fmt.Fprintf(&b, `<rect x="%d" y="8" width="12" height="12" fill="%s"/><text x="%d" y="18">%s</text>`, x, l.color, x+16, l.label)
		x += 16 + 7*len(l.label) + 18 // about 7px a character at 12px
	}
	nbins := 1
	if len(r.Lanes) > 0 {
		nbins = max(len(r.Lanes[0].Bins), 1)
	}
	p := panel{b: &b, barW: float64(chartPlotW) / float64(nbins), window: r.Window}
	for i := range r.Lanes {
		p.y0 = chartTop + i*(chartPanelH+chartGap) + 18 // panel top
		p.draw(&r.Lanes[i])
	}
	axisY := chartTop + len(r.Lanes)*(chartPanelH+chartGap) + 4
	for k := 0; k <= 4; k++ {
		x := chartLeft + chartPlotW*k/4
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`, x, axisY, fmtDur(r.Duration*time.Duration(k)/4))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// panel draws one lane's panel of the chart, its top at y0.
type panel struct {
	b      *strings.Builder
	y0     int
	barW   float64       // one bin's width
	window time.Duration // Result.Window
}

// draw writes the lane's group: its name and totals, its frame, bars and
// lines.
func (p panel) draw(lane *LaneResult) {
	b, y0 := p.b, p.y0
	peak := 1
	var longest time.Duration
	debt := 0 // bins ending in debt
	for _, bin := range lane.Bins {
		peak = max(peak, bin.Admitted+bin.Denied)
		longest = max(longest, bin.MaxDelay)
		debt += boolInt(bin.InDebt)
	}
	fmt.Fprintf(b, `<g class="lane" data-lane="%s" data-admitted="%d" data-denied="%d" data-max-admitted-in="%d" data-debt-bins="%d">`,
		html.EscapeString(lane.Name), lane.Admitted, lane.Denied, lane.MaxAdmittedIn, debt)
	// The lane's name, then its totals, each on a line of its own so
	// that a long rule name cannot push the totals out of the chart.
	fmt.Fprintf(b, `<text x="%d" y="%d" font-weight="bold">%s</text>`, chartLeft, y0-22, html.EscapeString(cut(lane.Name, 120)))
	fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`, chartLeft, y0-6, html.EscapeString(p.totals(lane, longest, debt)))
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#fafafa" stroke="#ccc"/>`, chartLeft, y0, chartPlotW, chartPanelH)
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%d</text><text x="%d" y="%d" text-anchor="end">0</text>`, chartLeft-6, y0+10, peak, chartLeft-6, y0+chartPanelH)
	p.bars(lane, peak)
	if lane.Capacity > 0 {
		p.line(lane, colorRemaining, func(bin Bin) float64 { return float64(bin.Remaining) / float64(lane.Capacity) })
	}
	if longest > 0 {
		p.line(lane, colorDelay, func(bin Bin) float64 { return float64(bin.MaxDelay) / float64(longest) })
	}
	b.WriteString(`</g>`)
}

// totals is the line under the lane's name: what it admitted and denied,
// and, where they apply, the most admitted within a window, the longest
// delay and the intervals ending in debt.
func (p panel) totals(lane *LaneResult, longest time.Duration, debt int) string {
	totals := fmt.Sprintf("admitted %d, denied %d", lane.Admitted, lane.Denied)
	if p.window > 0 {
		totals += fmt.Sprintf(", at most %d admitted within %s", lane.MaxAdmittedIn, fmtDur(p.window))
	}
	if longest > 0 {
		totals += ", longest delay " + fmtDur(longest)
	}
	if debt > 0 {
		totals += fmt.Sprintf(", in debt at the end of %d of %d intervals", debt, len(lane.Bins))
	}
	return totals
}

// bars draws each bin's admitted and denied requests as stacked bars,
// scaled to peak, over pink where the bin ends in debt.
func (p panel) bars(lane *LaneResult, peak int) {
	b, y0, barW := p.b, p.y0, p.barW
	for j, bin := range lane.Bins {
		x := float64(chartLeft) + float64(j)*barW
		if bin.InDebt {
			fmt.Fprintf(b, `<rect class="debt" x="%.1f" y="%d" width="%.2f" height="%d" fill="%s"/>`, x, y0, barW, chartPanelH, colorDebt)
		}
		ha := float64(chartPanelH) * float64(bin.Admitted) / float64(peak)
		hd := float64(chartPanelH) * float64(bin.Denied) / float64(peak)
		if bin.Admitted > 0 {
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.2f" height="%.1f" fill="%s"/>`, x, float64(y0+chartPanelH)-ha, max(barW-0.5, 0.5), ha, colorAdmitted)
		}
		if bin.Denied > 0 {
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.2f" height="%.1f" fill="%s"/>`, x, float64(y0+chartPanelH)-ha-hd, max(barW-0.5, 0.5), hd, colorDenied)
		}
	}
}

// line draws v, a fraction of the panel's height (clamped to [0, 1]), at
// each bin's end.
func (p panel) line(lane *LaneResult, color string, v func(Bin) float64) {
	p.b.WriteString(`<polyline fill="none" stroke-width="1.5" stroke="` + color + `" points="`)
	for j, bin := range lane.Bins {
		x := float64(chartLeft) + (float64(j)+1)*p.barW
		fmt.Fprintf(p.b, "%.1f,%.1f ", x, float64(p.y0+chartPanelH)-float64(chartPanelH)*min(max(v(bin), 0), 1))
	}
	p.b.WriteString(`"/>`)
}

// cut returns s, or its first n runes and "…" when it is longer.
func cut(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i] + "…"
		}
		n--
	}
	return s
}

// fmtDur prints d without needless zeros: 1m0s as 1m, 1.5s as 1.5s.
func fmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

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

// SVG draws the result as one panel per lane, stacked on a shared time
// axis: admitted (green) and denied (red) requests per bin as stacked bars,
// what the bucket holds at each bin's end as a blue line (scaled to the
// lane's capacity) and, for a queue, its longest delay per bin as an orange
// line, and the intervals a budget ends in debt shaded pink. Each panel's
// title gives the lane's totals. The drawing is a
// self-contained SVG document with no scripts or external references.
func (r *Result) SVG() string {
	const (
		width   = 960
		left    = 56
		right   = 16
		panelH  = 150
		gap     = 56
		top     = 50
		plotW   = width - left - right
		axisPad = 28
	)
	height := top + len(r.Lanes)*(panelH+gap) + axisPad
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12" role="img">`, width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#fff"/>`)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="14" font-weight="bold">%d requests over %s</text>`, left, r.Arrivals, fmtDur(r.Duration))
	legend := []struct{ color, label string }{{colorAdmitted, "admitted"}, {colorDenied, "denied"}, {colorRemaining, "remaining (of capacity)"}, {colorDelay, "queue delay"}, {colorDebt, "in debt"}}
	x := left + 250
	for _, l := range legend {
		fmt.Fprintf(&b, `<rect x="%d" y="8" width="12" height="12" fill="%s"/><text x="%d" y="18">%s</text>`, x, l.color, x+16, l.label)
		x += 16 + 7*len(l.label) + 18 // about 7px a character at 12px
	}
	nbins := 1
	if len(r.Lanes) > 0 {
		nbins = max(len(r.Lanes[0].Bins), 1)
	}
	barW := float64(plotW) / float64(nbins)
	for i, lane := range r.Lanes {
		y0 := top + i*(panelH+gap) + 18 // panel top
		peak := 1
		var longest time.Duration
		debt := 0 // bins ending in debt
		for _, bin := range lane.Bins {
			peak = max(peak, bin.Admitted+bin.Denied)
			longest = max(longest, bin.MaxDelay)
			debt += boolInt(bin.InDebt)
		}
		totals := fmt.Sprintf("admitted %d, denied %d", lane.Admitted, lane.Denied)
		if r.Window > 0 {
			totals += fmt.Sprintf(", at most %d admitted within %s", lane.MaxAdmittedIn, fmtDur(r.Window))
		}
		if longest > 0 {
			totals += ", longest delay " + fmtDur(longest)
		}
		if debt > 0 {
			totals += fmt.Sprintf(", in debt at the end of %d of %d intervals", debt, len(lane.Bins))
		}
		fmt.Fprintf(&b, `<g class="lane" data-lane="%s" data-admitted="%d" data-denied="%d" data-max-admitted-in="%d" data-debt-bins="%d">`,
			html.EscapeString(lane.Name), lane.Admitted, lane.Denied, lane.MaxAdmittedIn, debt)
		// The lane's name, then its totals, each on a line of its own so
		// that a long rule name cannot push the totals out of the chart.
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s</text>`, left, y0-22, html.EscapeString(cut(lane.Name, 120)))
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`, left, y0-6, html.EscapeString(totals))
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="#fafafa" stroke="#ccc"/>`, left, y0, plotW, panelH)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%d</text><text x="%d" y="%d" text-anchor="end">0</text>`, left-6, y0+10, peak, left-6, y0+panelH)
		for j, bin := range lane.Bins {
			x := float64(left) + float64(j)*barW
			if bin.InDebt {
				fmt.Fprintf(&b, `<rect class="debt" x="%.1f" y="%d" width="%.2f" height="%d" fill="%s"/>`, x, y0, barW, panelH, colorDebt)
			}
			ha := float64(panelH) * float64(bin.Admitted) / float64(peak)
			hd := float64(panelH) * float64(bin.Denied) / float64(peak)
			if bin.Admitted > 0 {
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.2f" height="%.1f" fill="%s"/>`, x, float64(y0+panelH)-ha, max(barW-0.5, 0.5), ha, colorAdmitted)
			}
			if bin.Denied > 0 {
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.2f" height="%.1f" fill="%s"/>`, x, float64(y0+panelH)-ha-hd, max(barW-0.5, 0.5), hd, colorDenied)
			}
		}
		line := func(color string, v func(Bin) float64) {
			b.WriteString(`<polyline fill="none" stroke-width="1.5" stroke="` + color + `" points="`)
			for j, bin := range lane.Bins {
				x := float64(left) + (float64(j)+1)*barW
				fmt.Fprintf(&b, "%.1f,%.1f ", x, float64(y0+panelH)-float64(panelH)*min(max(v(bin), 0), 1))
			}
			b.WriteString(`"/>`)
		}
		if lane.Capacity > 0 {
			line(colorRemaining, func(bin Bin) float64 { return float64(bin.Remaining) / float64(lane.Capacity) })
		}
		if longest > 0 {
			line(colorDelay, func(bin Bin) float64 { return float64(bin.MaxDelay) / float64(longest) })
		}
		b.WriteString(`</g>`)
	}
	axisY := top + len(r.Lanes)*(panelH+gap) + 4
	for k := 0; k <= 4; k++ {
		x := left + plotW*k/4
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`, x, axisY, fmtDur(r.Duration*time.Duration(k)/4))
	}
	b.WriteString(`</svg>`)
	return b.String()
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

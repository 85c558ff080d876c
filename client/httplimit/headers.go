package httplimit

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/ratelimitd/ratelimitd/client"
)

// setRateLimit sets the RateLimit-Policy and RateLimit headers of d, a
// decision on the request named by ds (see the package documentation).
func setRateLimit(h http.Header, d client.Decision, ds []client.Descriptor) {
	if d.Source == client.SourceLocal {
		var b strings.Builder
		appendItem(&b, d.Policy, "r", 0, "t", ceilSeconds(d.RetryAfter))
		h.Set("RateLimit", b.String())
		return
	}
	if d.Response == nil {
		return
	}
	var policy, limit strings.Builder
	seen := make(map[string]bool, len(ds))
	for i, st := range d.Response.GetStatuses() {
		rule := st.GetRule()
		if !st.GetMatched() || rule == nil || rule.GetUnlimited() || st.GetShadow() {
			continue
		}
		name := rule.GetName()
		if name == "" && i < len(ds) {
			name = ds[i].String()
		}
		if seen[name] {
			continue
		}
		seen[name] = true
		appendItem(&policy, name, "q", int64(rule.GetRequests()), "w", max(1, ceilSeconds(rule.GetPeriod().AsDuration())))
		appendItem(&limit, name, "r", int64(st.GetRemaining()), "t", ceilSeconds(st.GetResetAfter().AsDuration()))
	}
	if policy.Len() > 0 {
		h.Set("RateLimit-Policy", policy.String())
		h.Set("RateLimit", limit.String())
	}
}

// appendItem appends one member of a structured-field list (RFC 9651): a
// quoted name with two integer parameters.
func appendItem(b *strings.Builder, name, k1 string, v1 int64, k2 string, v2 int64) {
	if b.Len() > 0 {
		b.WriteString(", ")
	}
	b.WriteByte('"')
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e: // not allowed in an sf-string
			b.WriteByte('?')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	b.WriteString(";" + k1 + "=")
	b.WriteString(strconv.FormatInt(v1, 10))
	b.WriteString(";" + k2 + "=")
	b.WriteString(strconv.FormatInt(v2, 10))
}

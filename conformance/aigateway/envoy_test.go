package aigateway

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// aiGatewayMetadata is the dynamic metadata namespace AI Gateway's ext_proc
// writes (aigv1b1.AIGatewayFilterMetadataNamespace).
const aiGatewayMetadata = "io.envoy.ai_gateway"

// call is one HTTP request through Envoy, as the rate limit filter sees it.
type call struct {
	// route is the Envoy route the request matched, by its key in
	// translation.routes: "NAMESPACE/AIGATEWAYROUTE/RULE" for AI Gateway's,
	// Envoy's route name for Envoy Gateway's.
	route string
	// headers are the request's headers (lower-case names).
	headers map[string]string
	// backend ("NAMESPACE/NAME") and model are the AIServiceBackend that
	// served the request and the model name sent to it: AI Gateway's
	// upstream ext_proc writes them to the dynamic metadata
	// (ai_service_backend_name, model_name_override) once the backend is
	// picked, after the rate limit filter's request-path check.
	backend, model string
	// tokens is the request's cost as AI Gateway computes it from the
	// response's usage, written to the dynamic metadata as quota_cost (a
	// QuotaPolicy's costExpression, total_tokens by default) and as
	// llm_total_token; inputTokens and outputTokens are the usage's parts,
	// llm_input_token and llm_output_token (an AIGatewayRoute's
	// llmRequestCosts, named as in AI Gateway's examples).
	tokens, inputTokens, outputTokens uint64
}

// envoy plays Envoy's HTTP rate limit filter (envoy.filters.http.ratelimit)
// with the RateLimitPerRoute configuration the control plane put on each
// route (AI Gateway's extension server, Envoy Gateway's xDS translator),
// against the rate limit service at client:
//
//   - On the request path it builds one descriptor from each rate limit
//     entry of the route that is not apply_on_stream_done (an entry whose
//     actions do not all produce an entry is skipped, as Envoy skips it),
//     each with the entry's hits_addend if it has one, and calls
//     ShouldRateLimit with the route's domain, those descriptors and the
//     request's hits_addend left at 0. AI Gateway's QuotaPolicy entries
//     have no hits_addend (nor does it set the envoy.ratelimit.hits_addend
//     filter state), so each of their descriptors is charged 1, as AI
//     Gateway's own e2e test expects (a 20-token answer leaves 21 in the
//     counter); Envoy Gateway's token limits (cost.request number 0) carry
//     hits_addend 0: a check. OVER_LIMIT is a 429: the request goes no
//     further.
//   - When the stream is done (an allowed request, served and its usage
//     known) it builds the descriptors of the apply_on_stream_done entries,
//     each with its hits_addend (a format such as
//     %DYNAMIC_METADATA(io.envoy.ai_gateway:quota_cost)%: the request's
//     tokens), and calls ShouldRateLimit again; Envoy ignores that answer.
//
// An action or field neither control plane uses today fails the test rather
// than being guessed at.
type envoy struct {
	t      *testing.T
	client rlsv3.RateLimitServiceClient
	routes map[string]*ratelimitfilterv3.RateLimitPerRoute
	// checked is the last request-path exchange, for failure messages.
	checked string
}

// do sends c through the filter and reports whether it was allowed.
func (e *envoy) do(c call) bool {
	e.t.Helper()
	pr, ok := e.routes[c.route]
	if !ok {
		e.t.Fatalf("route %s: the control plane put no rate limit configuration on it (routes with one: %v)", c.route, keys(e.routes))
	}
	descs := e.descriptors(pr, c, false, nil)
	e.checked = "no descriptor: no call"
	if len(descs) > 0 {
		resp := e.call(&rlsv3.RateLimitRequest{Domain: pr.Domain, Descriptors: descs})
		e.checked = exchange(descs, resp)
		if resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			return false
		}
	}
	md := map[string]string{
		"ai_service_backend_name": c.backend,
		"model_name_override":     c.model,
		"quota_cost":              strconv.FormatUint(c.tokens, 10),
		"llm_total_token":         strconv.FormatUint(c.tokens, 10),
		"llm_input_token":         strconv.FormatUint(c.inputTokens, 10),
		"llm_output_token":        strconv.FormatUint(c.outputTokens, 10),
	}
	if done := e.descriptors(pr, c, true, md); len(done) > 0 {
		e.call(&rlsv3.RateLimitRequest{Domain: pr.Domain, Descriptors: done})
	}
	return true
}

func (e *envoy) call(req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.client.ShouldRateLimit(ctx, req)
	if err != nil {
		// AI Gateway's filter has failure_mode_deny false: an error would
		// let the request through. The suite wants the service's answer.
		e.t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

func (e *envoy) descriptors(pr *ratelimitfilterv3.RateLimitPerRoute, c call, onStreamDone bool, md map[string]string) []*ratelimitcommonv3.RateLimitDescriptor {
	e.t.Helper()
	var out []*ratelimitcommonv3.RateLimitDescriptor
	for _, rl := range pr.RateLimits {
		if rl.ApplyOnStreamDone != onStreamDone {
			continue
		}
		if rl.GetStage().GetValue() != 0 || rl.DisableKey != "" || rl.Limit != nil {
			e.t.Fatalf("rate limit entry %v: stage, disable_key or limit are not played", rl)
		}
		d := &ratelimitcommonv3.RateLimitDescriptor{}
		complete := true
		for _, a := range rl.Actions {
			entry, ok := e.entry(a, c, md)
			if !ok {
				complete = false
				break
			}
			d.Entries = append(d.Entries, entry)
		}
		if !complete {
			continue
		}
		if rl.HitsAddend != nil {
			n, ok := e.hitsAddend(rl.HitsAddend, md)
			if !ok {
				continue
			}
			d.HitsAddend = wrapperspb.UInt64(n)
		}
		out = append(out, d)
	}
	return out
}

// entry is one action's descriptor entry, or false when the action
// produces none (the whole descriptor is then skipped).
func (e *envoy) entry(a *routev3.RateLimit_Action, c call, md map[string]string) (*ratelimitcommonv3.RateLimitDescriptor_Entry, bool) {
	e.t.Helper()
	switch s := a.ActionSpecifier.(type) {
	case *routev3.RateLimit_Action_GenericKey_:
		key := s.GenericKey.DescriptorKey
		if key == "" {
			key = "generic_key"
		}
		return &ratelimitcommonv3.RateLimitDescriptor_Entry{Key: key, Value: s.GenericKey.DescriptorValue}, true
	case *routev3.RateLimit_Action_RequestHeaders_:
		if s.RequestHeaders.SkipIfAbsent {
			e.t.Fatalf("request_headers skip_if_absent is not played")
		}
		v, ok := c.headers[strings.ToLower(s.RequestHeaders.HeaderName)]
		if !ok {
			return nil, false
		}
		return &ratelimitcommonv3.RateLimitDescriptor_Entry{Key: s.RequestHeaders.DescriptorKey, Value: v}, true
	case *routev3.RateLimit_Action_HeaderValueMatch_:
		h := s.HeaderValueMatch
		matched := true
		for _, m := range h.Headers {
			if !e.headerMatches(m, c.headers) {
				matched = false
			}
		}
		expect := h.ExpectMatch == nil || h.ExpectMatch.Value
		if matched != expect {
			return nil, false
		}
		key := h.DescriptorKey
		if key == "" {
			key = "header_match"
		}
		return &ratelimitcommonv3.RateLimitDescriptor_Entry{Key: key, Value: h.DescriptorValue}, true
	case *routev3.RateLimit_Action_Metadata:
		m := s.Metadata
		if m.Source != routev3.RateLimit_Action_MetaData_DYNAMIC || m.MetadataKey.Key != aiGatewayMetadata || len(m.MetadataKey.Path) != 1 || m.SkipIfAbsent {
			e.t.Fatalf("metadata action %v is not played", m)
		}
		v, ok := md[m.MetadataKey.Path[0].GetKey()]
		if !ok || v == "" {
			if m.DefaultValue == "" {
				return nil, false
			}
			v = m.DefaultValue
		}
		return &ratelimitcommonv3.RateLimitDescriptor_Entry{Key: m.DescriptorKey, Value: v}, true
	default:
		e.t.Fatalf("rate limit action %T is not played", s)
		return nil, false
	}
}

func (e *envoy) headerMatches(m *routev3.HeaderMatcher, headers map[string]string) bool {
	e.t.Helper()
	v, present := headers[strings.ToLower(m.Name)]
	var ok bool
	switch sm := m.HeaderMatchSpecifier.(type) {
	case *routev3.HeaderMatcher_StringMatch:
		if !present {
			ok = false
			break
		}
		switch p := sm.StringMatch.MatchPattern.(type) {
		case *matcherv3.StringMatcher_Exact:
			ok = v == p.Exact
		case *matcherv3.StringMatcher_SafeRegex:
			ok = regexp.MustCompile("^(?:" + p.SafeRegex.Regex + ")$").MatchString(v)
		default:
			e.t.Fatalf("string matcher %T is not played", p)
		}
		if sm.StringMatch.IgnoreCase {
			e.t.Fatalf("ignore_case is not played")
		}
	default:
		e.t.Fatalf("header matcher %T is not played", sm)
	}
	if m.InvertMatch {
		ok = !ok
	}
	return ok
}

var dynamicMetadataFormat = regexp.MustCompile(`^%DYNAMIC_METADATA\(([^:)]+):([^:)]+)\)%$`)

func (e *envoy) hitsAddend(h *routev3.RateLimit_HitsAddend, md map[string]string) (uint64, bool) {
	e.t.Helper()
	if h.Format == "" {
		return h.GetNumber().GetValue(), true
	}
	m := dynamicMetadataFormat.FindStringSubmatch(h.Format)
	if m == nil || m[1] != aiGatewayMetadata {
		e.t.Fatalf("hits_addend format %q is not played", h.Format)
	}
	n, err := strconv.ParseUint(md[m[2]], 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

// exchange says what was asked and answered: each descriptor's entries and
// status.
func exchange(descs []*ratelimitcommonv3.RateLimitDescriptor, resp *rlsv3.RateLimitResponse) string {
	var b strings.Builder
	fmt.Fprintf(&b, "overall %s", resp.GetOverallCode())
	for i, d := range descs {
		var es []string
		for _, e := range d.Entries {
			es = append(es, e.Key+"="+e.Value)
		}
		st := resp.GetStatuses()
		if i < len(st) {
			fmt.Fprintf(&b, "; [%s] %s, %d left", strings.Join(es, ", "), st[i].GetCode(), st[i].GetLimitRemaining())
		} else {
			fmt.Fprintf(&b, "; [%s] no status", strings.Join(es, ", "))
		}
	}
	return b.String()
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func (c call) String() string {
	var hs []string
	for k, v := range c.headers {
		hs = append(hs, k+": "+v)
	}
	return fmt.Sprintf("route %s %v -> %s %s, %d tokens", c.route, hs, c.backend, c.model, c.tokens)
}

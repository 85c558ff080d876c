package envoyapi

import (
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimitd/ratelimitd/internal/engine"
)

// WithDynamicMetadata makes every response carry dynamic_metadata
// (upstream's RESPONSE_DYNAMIC_METADATA; off by default), which Envoy's
// rate limit filter puts into the request's dynamic metadata under its
// namespace, for the filters and the router after it:
//
//   - domain, descriptors and hitsAddend, as upstream writes them: the
//     request's domain; per request descriptor, in order, its entries as
//     "key=value" strings, its override as limit (the override message's
//     text form) and its own hits_addend as hitsAddend when set; the
//     request's hits_addend when not 0.
//   - metadata, as upstream: the descriptors' metadata (the policy's
//     metadata:), merged over those that passed (engine.Response.Metadata),
//     when any has some.
//   - beyond upstream, per descriptor the answer it got: code ("OK" or
//     "OVER_LIMIT", as its status), rule (the matched rule's name in
//     metrics, its stat key), limitRemaining and currentLimit (name,
//     requestsPerUnit, unit, unitMultiplier) as its status has them.
//   - beyond upstream, quotaGroups: the scopes of the request's quotas
//     that have room (engine.Scope), in request order, each with its
//     entries ("key=value") and the merged metadata of its quotas with
//     room: where a router can still send the request, its first choice
//     first. Present, possibly empty, when the request has quotas.
func WithDynamicMetadata(on bool) Option { return func(s *Server) { s.metadata = on } }

// dynamicMetadata builds the response's dynamic_metadata (see
// WithDynamicMetadata) for in, answered r with the statuses out.
func dynamicMetadata(in *rlsv3.RateLimitRequest, r *engine.Response, out []*rlsv3.RateLimitResponse_DescriptorStatus) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(in.GetDomain())}
	descriptors := make([]*structpb.Value, len(in.GetDescriptors()))
	for i, d := range in.GetDescriptors() {
		f := map[string]*structpb.Value{"entries": entriesValue(d.GetEntries())}
		if o := d.GetLimit(); o != nil {
			f["limit"] = structpb.NewStringValue(o.String())
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		st := out[i]
		f["code"] = structpb.NewStringValue(st.GetCode().String())
		if rule := r.Statuses[i].Rule; rule != nil {
			f["rule"] = structpb.NewStringValue(rule.StatKey)
		}
		if l := st.GetCurrentLimit(); l != nil {
			f["limitRemaining"] = structpb.NewNumberValue(float64(st.GetLimitRemaining()))
			cl := map[string]*structpb.Value{
				"requestsPerUnit": structpb.NewNumberValue(float64(l.GetRequestsPerUnit())),
				"unit":            structpb.NewStringValue(l.GetUnit().String()),
			}
			if l.GetName() != "" {
				cl["name"] = structpb.NewStringValue(l.GetName())
			}
			if m := l.GetUnitMultiplier(); m != nil {
				cl["unitMultiplier"] = structpb.NewNumberValue(float64(m.GetValue()))
			}
			f["currentLimit"] = structpb.NewStructValue(&structpb.Struct{Fields: cl})
		} else if r.Statuses[i].Limit != nil { // unlimited
			f["limitRemaining"] = structpb.NewNumberValue(float64(st.GetLimitRemaining()))
		}
		descriptors[i] = structpb.NewStructValue(&structpb.Struct{Fields: f})
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descriptors})
	if h := in.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	if md := r.Metadata(); md != nil {
		fields["metadata"] = structpb.NewStructValue(md)
	}
	if len(r.Scopes) > 0 {
		groups := make([]*structpb.Value, 0, len(r.Scopes))
		for g, sc := range r.Scopes {
			if !sc.Room {
				continue
			}
			f := map[string]*structpb.Value{"entries": scopeEntriesValue(sc)}
			if md := r.ScopeMetadata(g); md != nil {
				f["metadata"] = structpb.NewStructValue(md)
			}
			groups = append(groups, structpb.NewStructValue(&structpb.Struct{Fields: f}))
		}
		fields["quotaGroups"] = structpb.NewListValue(&structpb.ListValue{Values: groups})
	}
	return &structpb.Struct{Fields: fields}
}

// entriesValue is a descriptor's entries as upstream writes them: a list
// of "key=value".
func entriesValue(entries []*rlcommonv3.RateLimitDescriptor_Entry) *structpb.Value {
	values := make([]*structpb.Value, len(entries))
	for i, e := range entries {
		values[i] = structpb.NewStringValue(e.GetKey() + "=" + e.GetValue())
	}
	return structpb.NewListValue(&structpb.ListValue{Values: values})
}

// scopeEntriesValue is a scope's entries as entriesValue writes them.
func scopeEntriesValue(sc engine.Scope) *structpb.Value {
	values := make([]*structpb.Value, len(sc.Entries))
	for i, e := range sc.Entries {
		values[i] = structpb.NewStringValue(e.Key + "=" + e.Value)
	}
	return structpb.NewListValue(&structpb.ListValue{Values: values})
}

package engine

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
)

// Passed reports whether the descriptor passed, as envoyproxy/ratelimit
// counts it for the metadata of its response: admitted (a shadow rule
// always is, as its Envoy status is OK), and not unlimited (upstream leaves
// unlimited descriptors out).
func (st *Status) Passed() bool {
	if st.Limit != nil && st.Limit.Unlimited {
		return false
	}
	return st.Code == algorithms.Allowed || st.Shadow
}

// Metadata returns the metadata of the rules (config.Rule.Metadata) of
// the descriptors that passed (Status.Passed), merged in request order as
// envoyproxy/ratelimit merges them: a key already present keeps its value,
// except that two objects under one key are merged the same way, key by
// key. nil when none of them has metadata. The result is new; the rules'
// metadata is not modified.
func (r *Response) Metadata() *structpb.Struct {
	var out *structpb.Struct
	for i := range r.Statuses {
		if st := &r.Statuses[i]; st.Passed() && st.Rule != nil {
			out = mergeMetadata(out, st.Rule.Metadata)
		}
	}
	return out
}

// ScopeMetadata returns the metadata of the quotas with room of scope g
// (an index of r.Scopes), merged as Metadata merges them: what a router
// reads to send the request where the scope's quota has room. nil when
// none has metadata.
func (r *Response) ScopeMetadata(g int) *structpb.Struct {
	var out *structpb.Struct
	for i := range r.Statuses {
		if st := &r.Statuses[i]; st.Scope == g+1 && st.Code == algorithms.Allowed && st.Rule != nil {
			out = mergeMetadata(out, st.Rule.Metadata)
		}
	}
	return out
}

// mergeMetadata merges src into dst (a new Struct when dst is nil and src
// has fields) and returns dst. Values are copied from src, never shared.
func mergeMetadata(dst, src *structpb.Struct) *structpb.Struct {
	if len(src.GetFields()) == 0 {
		return dst
	}
	if dst == nil {
		dst = &structpb.Struct{Fields: make(map[string]*structpb.Value, len(src.GetFields()))}
	}
	for k, v := range src.GetFields() {
		have, ok := dst.Fields[k]
		switch {
		case !ok:
			dst.Fields[k] = proto.Clone(v).(*structpb.Value)
		case have.GetStructValue() != nil && v.GetStructValue() != nil:
			mergeMetadata(have.GetStructValue(), v.GetStructValue())
		}
	}
	return dst
}

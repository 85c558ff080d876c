// Package config reads policies: it parses and validates policy files
// (Load, Parse, Default) and xDS RateLimitConfig resources, and matches a
// request's descriptors to their rules (Domain.Match). The format, its
// extensions and its differences from envoyproxy/ratelimit are described
// in docs/policy.md.
//
// Loading is all or nothing: Load returns a policy only when every file
// is valid, and otherwise every problem found (up to 1000), each a
// FieldError with its file, line and field path. Loading is bounded by
// PolicyBounds before anything is held: bytes from the files' sizes,
// descriptors as they are built (YAML aliases counted at each use), depth
// by MaxDepth.
//
// Domain.Match walks the rule tree one level per entry of a descriptor.
// At each level the entry selects exactly one descriptor: the one with its
// key and value; else the first, in file order, whose value is a wildcard
// that matches (each * any run of bytes, the empty one included); else the
// one with its key and no value. There is no backtracking. The descriptor
// the last entry selects is the match if it has a limit, so a request's
// depth must equal the rule's. Keys never hold wildcards.
//
// NewInlineLimit makes a limit a request carries itself. Its Key starts
// with "inline:", which no policy limit's Key does, so an inline limit
// never shares a bucket with a policy limit.
package config

// Package config reads policy files: it parses and validates them (Load,
// Parse, Default) and matches request descriptors to their rules
// (Domain.Match).
//
// # Files
//
// A policy file is YAML and defines one domain. Load takes a file, or a
// directory of *.yaml and *.yml files; a domain defined in two files is an
// error. The format is that of envoyproxy/ratelimit, whose files load
// unchanged (but see Differences below), with extensions:
//
//	domain: api                   # required, unique across files
//	quota_fallback: allow         # optional: allow, deny or ask; quota clients without an assignment (docs/quota.md)
//	descriptors:                  # the rule tree; a list at every level
//	  - key: remote_address       # required
//	    value: 10.0.0.1           # optional; a * makes it a wildcard
//	    rate_limit:               # optional: the descriptor's limit
//	      unit: second            # second, minute, hour, day, week, month, year
//	      requests_per_unit: 10   # 1 … 4294967295
//	      name: per_ip            # optional, for replaces
//	      replaces:               # optional: limits this one replaces
//	        - name: other_limit
//	      unlimited: false        # true: always admit, keep no bucket
//	    shadow_mode: false        # true: charge and report, never deny
//	    quota_mode: false         # true: one of the request's quotas (below)
//	    detailed_metric: false    # true: metrics may carry request values
//	    value_to_metric: false    # accepted; metrics only (below)
//	    share_threshold: false    # true, on a wildcard value: one bucket for all its values
//	    metadata: {}              # any mapping, returned to the caller (below)
//	    refunds: true             # false: refuse refunds of this rule (below)
//	    descriptors: []           # optional: the next level
//
// A descriptor with neither a limit nor nested descriptors is allowed, as
// upstream allows it: it matches nothing, so a request that selects it is
// unmatched (allowed) rather than falling to a less specific descriptor.
// shadow_mode and detailed_metric concern the descriptor's own limits; on a
// descriptor without limits they do nothing (upstream accepts them there
// too). Units are case-insensitive; a week is 7 days, a month 30 days and a
// year 365 days, as upstream counts them.
//
// The descriptor fields upstream added later, with its semantics:
//
//   - share_threshold: true, allowed only on a descriptor whose value is a
//     wildcard (holds a *): every value the wildcard matches counts in one
//     bucket, instead of one bucket per value. It holds for the limits of
//     the descriptor and of every descriptor nested under it (with a
//     bucket per value of their own entries, unless they share too):
//     Rule.Shared.
//   - quota_mode: true makes the rule's limits quotas (Rule.QuotaMode). A
//     request is denied by its quota descriptors only when every one of
//     them is over its limit; a quota descriptor over its limit reports
//     its denial in its status while the request goes through on another
//     quota. Other descriptors deny as always. The engine documents how
//     this is charged.
//   - value_to_metric: a boolean, accepted and checked. Upstream puts the
//     request's value into the statsd key of a descriptor matched by its
//     key alone or by a wildcard; ratelimitd's per-rule metrics are
//     labelled by the rule's descriptor path, and carry request values
//     only under detailed_metric, so the field changes nothing here.
//   - metadata: a mapping of anything JSON holds (string keys), the
//     rule's Metadata; over xDS, the descriptor's metadata Struct. It
//     changes no decision. As upstream with RESPONSE_DYNAMIC_METADATA,
//     the Envoy API with --response-dynamic-metadata merges the metadata
//     of the descriptors that passed into the response's dynamic
//     metadata; ratelimit.v1 returns it per status (docs/envoy.md).
//
// # Extensions
//
// Under rate_limit:
//
//   - algorithm: fixed_window (the default, as upstream counts),
//     sliding_window, token_bucket, leaky_bucket or leaky_bucket_queue.
//   - burst: the capacity of token_bucket, leaky_bucket and
//     leaky_bucket_queue (default requests_per_unit); an error for the
//     windows, which admit requests_per_unit per period.
//   - unit_multiplier: the period is this many units (default 1), so
//     unit: minute with unit_multiplier: 5 is 5 minutes. The period is at
//     most algorithms.MaxSpan.
//   - retry_jitter: a Go duration such as "250ms"; a denial's retry-after
//     may be lengthened by a random amount up to it, so that denied clients
//     do not all return at once. Default 0.
//   - overdraft: true makes a charge to the limit an overdraft charge: it
//     is taken in full whatever is left, so usage known only afterwards (an
//     LLM answer's tokens) always lands, and the bucket may go into debt,
//     denying checks and charges until its own refill has paid the debt
//     back (see the engine). false: a charge is admitted only when it
//     fits. When absent (Limit.Overdraft is OverdraftDefault), the daemon's
//     --overdraft-by-default decides; it is off unless set. Not allowed
//     with unlimited: true or requests_per_unit: 0, which keep no bucket.
//
// On a descriptor, refunds: false makes its rule take no refunds
// (Rule.NoRefunds): the engine refuses, with an engine.RefusedError that
// every API answers PermissionDenied, a request in which any descriptor
// matching the rule asks a refund (ratelimit.v1 OPERATION_REFUND, Envoy's
// is_negative_hits), whatever its cost, and applies nothing of it. A
// caller that may charge a limit and give the charge back could otherwise
// charge it without end. It concerns the descriptor's own limits:
// descriptors nested below do not inherit it, and refunds: false on a
// descriptor without limits is an error (it would protect nothing).
// Absent, null or true, the rule takes refunds. RateLimitConfig resources
// (xDS) have no such field: their rules take refunds, and the
// authorization policy decides who may send them.
//
// And on a descriptor, rate_limits: a list of rate_limit blocks, for
// several limits on one descriptor; a request is admitted only when every
// one admits it. A descriptor has rate_limit or rate_limits, not both; two
// limits of one descriptor with the same arithmetic are an error, and so is
// an unlimited limit among others. For example, per user, bursts of up to
// 20 refilled at 10 a second, and at most 6000 in any 10 minutes:
//
//	domain: api
//	descriptors:
//	  - key: user
//	    rate_limits:
//	      - name: user_burst
//	        algorithm: token_bucket
//	        unit: second
//	        requests_per_unit: 10
//	        burst: 20
//	        retry_jitter: 250ms
//	      - name: user_sustained
//	        algorithm: sliding_window
//	        unit: minute
//	        unit_multiplier: 10
//	        requests_per_unit: 6000
//
// # Validation
//
// A file is checked completely, and every problem is reported with the
// file, the line, the field path and what is wrong (see FieldError):
// unknown or repeated fields anywhere; a missing or empty domain or key;
// two descriptors with the same key and value at one level; an unknown
// unit or algorithm; a requests_per_unit, burst or unit_multiplier that is
// missing where required, not a whole number, or out of range; unlimited
// together with unit, requests_per_unit, algorithm, burst, unit_multiplier
// retry_jitter or overdraft; algorithm, burst or overdraft with
// requests_per_unit: 0; overdraft or refunds that is not a boolean;
// refunds: false on a descriptor without limits; burst with a
// window algorithm; a retry_jitter that is
// not a duration or is negative; a period beyond algorithms.MaxSpan or a
// bucket that takes longer to drain; replaces entries without a name,
// naming their own limit, or naming no limit of the domain; rate_limit and
// rate_limits together, or an empty one. A file's problems are listed up
// to 1000, then counted.
//
// Descriptors nest at most MaxDepth (64) deep: a descriptor below 64
// others is a problem.
//
// Loading is bounded (PolicyBounds, DefaultPolicyBounds): a file larger than
// MaxBytes (2 MiB by default), or a directory whose files are larger
// together, is rejected from its size before it is read; a policy with more
// than MaxDescriptors descriptors (100,000 by default, counting each use of
// an alias, all files of a directory together) is rejected as soon as
// building reaches the first one too many.
//
// A domain without any limit that can deny (no descriptors, descriptors
// without rate_limit or rate_limits anywhere, or only unlimited ones) is
// valid and admits every request: Domain.HasLimits tells, so that the
// daemon and check-config can warn.
//
// # Matching
//
// A request names a domain and gives descriptors, each a list of entries
// (key, value). Domain.Match finds the rule of one descriptor by walking
// the tree one level per entry. At each level the entry selects exactly
// one descriptor, trying in turn:
//
//  1. exact: the descriptor with the entry's key and value;
//  2. wildcard: the first descriptor, in file order, with the entry's key
//     whose value holds a * and matches the entry's value, each * standing
//     for any run of bytes, the empty one included, as upstream matches
//     them: "/api/*" matches "/api/" and "/api/orders"; "*.png" matches
//     "a.png"; "/api/*/orders" matches "/api/v1/orders" and "/api//orders";
//     "svc*ep*rpc" needs "svc", then "ep", then "rpc" at the end; a value
//     of just "*" matches every value, the empty value too;
//  3. key only: the descriptor with the entry's key and no value. Every
//     value matches it, and each value is counted in a bucket of its own
//     (the engine builds bucket keys from the request's values).
//
// The descriptor the last entry selects is the match if it has a limit.
// Depth must agree: a request with fewer entries than the rule's depth
// ends on a descriptor without a limit, and a request with more entries
// runs past the tree's leaves; neither matches. There is no backtracking:
// when the descriptor chosen at one level does not lead to a match, a less
// specific one at that level is not tried. Keys never hold wildcards.
//
// Rule.StatKey is the domain and, per level, the key or key_value as the
// file wrote it, joined by dots: "api.user", "api.path_/api/*.user".
//
// # Differences from envoyproxy/ratelimit
//
// These are deliberate. Most reject a file that upstream reads without
// complaint but probably not as its author meant.
//
//   - requests_per_unit: 0 denies every request, as upstream, whatever
//     algorithm the limit names (burst and overdraft are refused beside
//     it); it is reported as over capacity (no wait admits it). Missing
//     requests_per_unit (upstream: 0, the same) is an error: write the 0.
//   - Unknown fields are errors where they stand; upstream accepts a known
//     field name at any level (unit directly under a descriptor) and ignores
//     it. An empty rate_limit: is an error; upstream reads it as no limit.
//     unlimited: true with requests_per_unit is an error; upstream ignores
//     the number.
//   - replaces must name a limit of the domain; upstream does not check.
//   - Upstream joins key and value as "key_value" to look them up, so a key
//     containing "_" could match another key's entries, and a key-only
//     descriptor whose key ends in * acts as a wildcard over keys. Here the
//     key always matches exactly and only a value holds a wildcard.
//   - A file with a second YAML document is an error; upstream reads the
//     first and ignores the rest.
//   - A domain defined twice is always an error (upstream can merge them
//     with MERGE_DOMAIN_CONFIG).
//
// As upstream's parser (yaml.v2) does, a string field takes any scalar
// (value: 200 is "200") and a boolean field takes YAML 1.1's yes/no/on/off.
//
// # Inline limits
//
// NewInlineLimit makes a limit a request carries itself. Its Key starts
// with "inline:", which no policy limit's Key does, so an inline limit
// never shares a bucket with a policy limit.
package config

package aigateway

import (
	"fmt"
	"strings"
	"testing"
)

// The promises: sentences of Envoy AI Gateway's documentation, v1.0.0,
// site/docs/capabilities/traffic/quota-policy.md, as its users read them.
const (
	promiseAllBackends = "When all related backend's quota are exceeded, requests are rejected with a `429 Too Many Requests` status code."
	promiseAllBuckets  = "When all related quota buckets for that model are exceeded, subsequent matching requests receive `429 Too Many Requests`."
	promisePerModel    = "**Per-model token quotas** — assign token budgets to individual models served by an `AIServiceBackend`."
	promiseOwnBudget   = "You can attach quotas for multiple models, each with its own budget"
	promiseChargedAll  = "The request is charged to **all** matching `bucketRules` **and** the `defaultBucket`."
	promiseAtLeastOne  = "The request is allowed only if quota is available in **at least one** matching bucket."
	promisePrecedence  = "When multiple `QuotaPolicy` resources define the same model for the same `AIServiceBackend`, the policy whose namespace/name sorts alphabetically first takes precedence."
	promiseShadow      = "When `shadowMode` is enabled on a bucket rule, all quota checks are performed (cache lookups, counter updates, telemetry), but the outcome is never enforced — the request always succeeds even if the quota is exceeded."
	promiseShadowTest  = "Shadow mode lets you test a bucket rule without rejecting traffic."
	promiseBudget      = "QuotaPolicy manages **total consumption budgets** (for example, 100,000 tokens per hour). [...] Use QuotaPolicy when you need to cap cumulative token spend across a time window."
	promiseCost        = "For each completed request, the token cost is computed using the configured cost expression (defaults to `total_tokens`). The cost is charged against the matching quota bucket"
)

// How the arithmetic below counts: a bucket's "used" is the tokens of the
// requests it served plus 1 for each request-path check Envoy sent it (AI
// Gateway's filter configuration charges 1 there: its own e2e test expects
// 21 after one 20-token answer). A bucket has room while used < limit.
// Where a decision could hinge on that extra 1 it is said; the numbers are
// chosen so that no promised decision does, except where the 1 is the
// subject.

// backend is an AIServiceBackend in namespace default.
func backend(name string) string {
	return fmt.Sprintf(`apiVersion: aigateway.envoyproxy.io/v1beta1
kind: AIServiceBackend
metadata: {name: %s, namespace: default}
spec:
  schema: {name: OpenAI}
  backendRef: {name: %s, kind: Backend, group: gateway.envoyproxy.io}
`, name, name)
}

func resources(docs ...string) string { return strings.Join(docs, "---\n") }

// TestPerModelQuota: two models on one backend, each with its own budget.
func TestPerModelQuota(t *testing.T) {
	t.Parallel()
	tr := aiGateway(t, resources(backend("openai"), `apiVersion: aigateway.envoyproxy.io/v1beta1
kind: AIGatewayRoute
metadata: {name: chat, namespace: default}
spec:
  rules:
    - matches: [{headers: [{type: Exact, name: x-ai-eg-model, value: gpt-4}]}]
      backendRefs: [{name: openai, modelNameOverride: gpt-4}]
    - matches: [{headers: [{type: Exact, name: x-ai-eg-model, value: gpt-3.5-turbo}]}]
      backendRefs: [{name: openai, modelNameOverride: gpt-3.5-turbo}]
`, `apiVersion: aigateway.envoyproxy.io/v1alpha1
kind: QuotaPolicy
metadata: {name: models, namespace: default}
spec:
  targetRefs: [{group: aigateway.envoyproxy.io, kind: AIServiceBackend, name: openai}]
  perModelQuotas:
    - modelName: gpt-4
      quota:
        defaultBucket: {limit: 100, duration: "1d"}
    - modelName: gpt-3.5-turbo
      quota:
        defaultBucket: {limit: 1000, duration: "1d"}
`))
	d := deploy(t, tr, asAIGatewayDeploysIt())
	gpt4 := func(tokens uint64) call {
		return call{route: "default/chat/0", backend: "default/openai", model: "gpt-4", tokens: tokens}
	}
	gpt35 := func(tokens uint64) call {
		return call{route: "default/chat/1", backend: "default/openai", model: "gpt-3.5-turbo", tokens: tokens}
	}
	d.play(t, []step{
		{gpt4(40), true, promiseAllBuckets, "gpt-4: 0 of 100 used"},
		{gpt4(40), true, promiseAllBuckets, "gpt-4: 41 of 100 used"},
		{gpt4(40), true, promiseCost, "gpt-4: 82 of 100 used; this answer's 40 tokens are charged in full: 123"},
		{gpt4(1), false, promiseAllBuckets, "gpt-4: 123 of 100 used"},
		{gpt35(40), true, promiseOwnBudget, "gpt-3.5-turbo: 0 of 1000 used; gpt-4's tokens are not charged to it"},
		{gpt4(1), false, promiseAllBuckets, "gpt-4: still over 100"},
		{gpt35(40), true, promiseOwnBudget, "gpt-3.5-turbo: 41 of 1000 used"},
	})
}

// TestPerBackendQuota: the same model on two backends, each with a
// QuotaPolicy of its own: each backend's model has its own budget.
//
// (One QuotaPolicy naming both backends is another matter: AI Gateway's
// extension server then puts both backends' buckets on every route that
// serves either, so a request is allowed while either has room, whichever
// backend serves it — TestQuotaAcrossBackends.)
func TestPerBackendQuota(t *testing.T) {
	t.Parallel()
	policy := func(backend string) string {
		return fmt.Sprintf(`apiVersion: aigateway.envoyproxy.io/v1alpha1
kind: QuotaPolicy
metadata: {name: %s-quota, namespace: default}
spec:
  targetRefs: [{group: aigateway.envoyproxy.io, kind: AIServiceBackend, name: %s}]
  perModelQuotas:
    - modelName: llama-3
      quota:
        defaultBucket: {limit: 100, duration: "1d"}
`, backend, backend)
	}
	tr := aiGateway(t, resources(backend("us"), backend("eu"), `apiVersion: aigateway.envoyproxy.io/v1beta1
kind: AIGatewayRoute
metadata: {name: chat, namespace: default}
spec:
  rules:
    - matches: [{headers: [{type: Exact, name: x-region, value: us}]}]
      backendRefs: [{name: us, modelNameOverride: llama-3}]
    - matches: [{headers: [{type: Exact, name: x-region, value: eu}]}]
      backendRefs: [{name: eu, modelNameOverride: llama-3}]
`, policy("us"), policy("eu")))
	d := deploy(t, tr, asAIGatewayDeploysIt())
	us := func(tokens uint64) call {
		return call{route: "default/chat/0", backend: "default/us", model: "llama-3", tokens: tokens}
	}
	eu := func(tokens uint64) call {
		return call{route: "default/chat/1", backend: "default/eu", model: "llama-3", tokens: tokens}
	}
	d.play(t, []step{
		{us(60), true, promisePerModel, "us llama-3: 0 of 100 used"},
		{us(60), true, promisePerModel, "us llama-3: 61 of 100 used"},
		{us(1), false, promiseAllBuckets, "us llama-3: 122 of 100 used"},
		{eu(60), true, promisePerModel, "eu llama-3: 0 of 100 used: its own budget, untouched by us's"},
		{eu(1), true, promisePerModel, "eu llama-3: 61 of 100 used"},
		{us(1), false, promiseAllBuckets, "us llama-3: still over 100"},
	})
}

// TestPremiumTenantOverride: the documentation's premium tenant, a bucket
// rule beside the shared default bucket (quota_mode descriptors).
func TestPremiumTenantOverride(t *testing.T) {
	t.Parallel()
	tr := aiGateway(t, resources(backend("openai"), `apiVersion: aigateway.envoyproxy.io/v1beta1
kind: AIGatewayRoute
metadata: {name: chat, namespace: default}
spec:
  rules:
    - matches: [{headers: [{type: Exact, name: x-ai-eg-model, value: gpt-4}]}]
      backendRefs: [{name: openai, modelNameOverride: gpt-4}]
`, `apiVersion: aigateway.envoyproxy.io/v1alpha1
kind: QuotaPolicy
metadata: {name: tenants, namespace: default}
spec:
  targetRefs: [{group: aigateway.envoyproxy.io, kind: AIServiceBackend, name: openai}]
  perModelQuotas:
    - modelName: gpt-4
      quota:
        mode: Shared
        defaultBucket: {limit: 100, duration: "1d"}
        bucketRules:
          - clientSelectors:
              - headers: [{name: x-tenant-id, type: Exact, value: premium-tenant}]
            quota: {limit: 500, duration: "1d"}
`))
	d := deploy(t, tr, asAIGatewayDeploysIt())
	tenant := func(id string, tokens uint64) call {
		return call{route: "default/chat/0", headers: map[string]string{"x-tenant-id": id}, backend: "default/openai", model: "gpt-4", tokens: tokens}
	}
	d.play(t, []step{
		{tenant("premium-tenant", 150), true, promiseAtLeastOne, "premium 0 of 500, default 0 of 100"},
		{tenant("acme", 1), false, promiseChargedAll, "the premium tenant's 150 tokens were charged to the shared default bucket too: 151 of 100; acme matches no rule, so the default is its only bucket"},
		{tenant("premium-tenant", 100), true, promiseAtLeastOne, "premium 151 of 500 has room; the default (over 100) is spent"},
		{tenant("premium-tenant", 300), true, promiseAtLeastOne, "premium 252 of 500 has room"},
		{tenant("premium-tenant", 1), false, promiseAllBuckets, "premium 553 of 500 and the default over 100: every bucket of the request is exceeded"},
		{tenant("acme", 1), false, promiseAllBuckets, "the default is spent"},
	})
}

// TestTwoPoliciesOnOneBackendAndModel: two QuotaPolicies name the same
// backend and model. AI Gateway's controller keeps the first one's limit,
// and its extension server puts one request-path rate limit entry per
// policy on the route: Envoy names the same bucket twice in one request.
func TestTwoPoliciesOnOneBackendAndModel(t *testing.T) {
	t.Parallel()
	policy := func(name string, limit int) string {
		return fmt.Sprintf(`apiVersion: aigateway.envoyproxy.io/v1alpha1
kind: QuotaPolicy
metadata: {name: %s, namespace: default}
spec:
  targetRefs: [{group: aigateway.envoyproxy.io, kind: AIServiceBackend, name: openai}]
  perModelQuotas:
    - modelName: gpt-4
      quota:
        defaultBucket: {limit: %d, duration: "1d"}
`, name, limit)
	}
	tr := aiGateway(t, resources(backend("openai"), `apiVersion: aigateway.envoyproxy.io/v1beta1
kind: AIGatewayRoute
metadata: {name: chat, namespace: default}
spec:
  rules:
    - matches: [{headers: [{type: Exact, name: x-ai-eg-model, value: gpt-4}]}]
      backendRefs: [{name: openai, modelNameOverride: gpt-4}]
`, policy("team-a", 100), policy("team-b", 1000)))
	d := deploy(t, tr, asAIGatewayDeploysIt())
	gpt4 := call{route: "default/chat/0", backend: "default/openai", model: "gpt-4", tokens: 32}
	d.play(t, []step{
		{gpt4, true, promisePrecedence, "default/team-a sorts first: its 100 is the budget; 0 of 100 used"},
		{gpt4, true, promisePrecedence, "33 of 100 used"},
		{gpt4, true, promisePrecedence, "66 of 100 used"},
		{gpt4, true, promisePrecedence, "99 of 100 used, as under team-a alone: one request is checked once, though Envoy names its bucket twice (102 if each naming were charged)"},
		{gpt4, false, promisePrecedence, "132 of team-a's 100 used (team-b's 1000 does not apply)"},
	})
}

// TestShadowMode: a bucket rule in shadow mode is counted and never
// changes a decision, neither denying when it is exceeded nor allowing
// when the default bucket is spent.
func TestShadowMode(t *testing.T) {
	t.Parallel()
	tr := aiGateway(t, resources(backend("openai"), `apiVersion: aigateway.envoyproxy.io/v1beta1
kind: AIGatewayRoute
metadata: {name: chat, namespace: default}
spec:
  rules:
    - matches: [{headers: [{type: Exact, name: x-ai-eg-model, value: gpt-4o-mini}]}]
      backendRefs: [{name: openai, modelNameOverride: gpt-4o-mini}]
    - matches: [{headers: [{type: Exact, name: x-ai-eg-model, value: gpt-4}]}]
      backendRefs: [{name: openai, modelNameOverride: gpt-4}]
`, `apiVersion: aigateway.envoyproxy.io/v1alpha1
kind: QuotaPolicy
metadata: {name: trial, namespace: default}
spec:
  targetRefs: [{group: aigateway.envoyproxy.io, kind: AIServiceBackend, name: openai}]
  perModelQuotas:
    - modelName: gpt-4o-mini
      quota:
        defaultBucket: {limit: 1000, duration: "1d"}
        bucketRules:
          - clientSelectors:
              - headers: [{name: x-tenant-id, type: Exact, value: trial}]
            quota: {limit: 50, duration: "1d"}
            shadowMode: true
    - modelName: gpt-4
      quota:
        defaultBucket: {limit: 100, duration: "1d"}
        bucketRules:
          - clientSelectors:
              - headers: [{name: x-tenant-id, type: Exact, value: trial}]
            quota: {limit: 1000, duration: "1d"}
            shadowMode: true
`))
	d := deploy(t, tr, asAIGatewayDeploysIt())
	trial := func(rule int, model string, tokens uint64) call {
		return call{route: fmt.Sprintf("default/chat/%d", rule), headers: map[string]string{"x-tenant-id": "trial"}, backend: "default/openai", model: model, tokens: tokens}
	}
	d.play(t, []step{
		{trial(0, "gpt-4o-mini", 40), true, promiseShadow, "shadow rule 0 of 50, default 0 of 1000"},
		{trial(0, "gpt-4o-mini", 40), true, promiseShadow, "shadow rule 41 of 50, default 41 of 1000"},
		{trial(0, "gpt-4o-mini", 40), true, promiseShadow, "shadow rule 82 of 50 exceeded, never enforced; default 82 of 1000"},
		{trial(0, "gpt-4o-mini", 40), true, promiseShadow, "shadow rule 123 of 50 exceeded, never enforced; default 123 of 1000"},
		{trial(1, "gpt-4", 150), true, promiseShadow, "gpt-4: default 0 of 100, shadow rule 0 of 1000"},
		{trial(1, "gpt-4", 1), false, promiseShadowTest, "gpt-4: default 151 of 100 spent; the shadow rule's bucket (151 of 1000) has room, but its outcome is never enforced: without the rule this request is a 429, and so it is with it"},
	})
}

// TestRaiseLimitMidWindow: a QuotaPolicy's limit raised from 100 to 400
// while its window has 124 tokens used: the window's cumulative spend is
// capped by the new budget, not started afresh.
func TestRaiseLimitMidWindow(t *testing.T) {
	t.Parallel()
	policy := func(limit int) string {
		return fmt.Sprintf(`apiVersion: aigateway.envoyproxy.io/v1alpha1
kind: QuotaPolicy
metadata: {name: budget, namespace: default}
spec:
  targetRefs: [{group: aigateway.envoyproxy.io, kind: AIServiceBackend, name: openai}]
  perModelQuotas:
    - modelName: gpt-4
      quota:
        defaultBucket: {limit: %d, duration: "1d"}
`, limit)
	}
	base := resources(backend("openai"), `apiVersion: aigateway.envoyproxy.io/v1beta1
kind: AIGatewayRoute
metadata: {name: chat, namespace: default}
spec:
  rules:
    - matches: [{headers: [{type: Exact, name: x-ai-eg-model, value: gpt-4}]}]
      backendRefs: [{name: openai, modelNameOverride: gpt-4}]
`)
	d := deploy(t, aiGateway(t, resources(base, policy(100))), asAIGatewayDeploysIt())
	gpt4 := call{route: "default/chat/0", backend: "default/openai", model: "gpt-4", tokens: 30}
	d.play(t, []step{
		{gpt4, true, promiseBudget, "0 of 100 used"},
		{gpt4, true, promiseBudget, "31 of 100 used"},
		{gpt4, true, promiseBudget, "62 of 100 used"},
		{gpt4, true, promiseBudget, "93 of 100 used"},
		{gpt4, false, promiseBudget, "124 of 100 used"},
	})
	d.update(t, "2", aiGateway(t, resources(base, policy(400))))
	var raised []step
	for k := range 9 {
		used := 124 + 31*k
		raised = append(raised, step{gpt4, true, promiseBudget, fmt.Sprintf("raised to 400: %d of 400 used in this window (125.. if the 429's check was counted)", used)})
	}
	raised = append(raised, step{gpt4, false, promiseBudget, "403 of 400 used in this window: the cap is reached (a fresh window would allow 4 more)"})
	d.play(t, raised)
}

// TestQuotaAcrossBackends: one route served by two backends (a primary and
// its fallback) with one QuotaPolicy on both: Envoy checks both buckets on
// every request, and the request is a 429 only when both are exceeded. The
// request is served by the first backend with room, as a quota-aware route
// would pick it.
func TestQuotaAcrossBackends(t *testing.T) {
	t.Parallel()
	tr := aiGateway(t, resources(backend("primary"), backend("fallback"), `apiVersion: aigateway.envoyproxy.io/v1beta1
kind: AIGatewayRoute
metadata: {name: chat, namespace: default}
spec:
  rules:
    - matches: [{headers: [{type: Exact, name: x-ai-eg-model, value: llama-3}]}]
      backendRefs:
        - {name: primary, modelNameOverride: llama-3, priority: 0}
        - {name: fallback, modelNameOverride: llama-3, priority: 1}
`, `apiVersion: aigateway.envoyproxy.io/v1alpha1
kind: QuotaPolicy
metadata: {name: llama, namespace: default}
spec:
  targetRefs:
    - {group: aigateway.envoyproxy.io, kind: AIServiceBackend, name: primary}
    - {group: aigateway.envoyproxy.io, kind: AIServiceBackend, name: fallback}
  perModelQuotas:
    - modelName: llama-3
      quota:
        defaultBucket: {limit: 100, duration: "1d"}
`))
	d := deploy(t, tr, asAIGatewayDeploysIt())
	served := func(by string, tokens uint64) call {
		return call{route: "default/chat/0", backend: "default/" + by, model: "llama-3", tokens: tokens}
	}
	d.play(t, []step{
		{served("primary", 60), true, promiseAllBackends, "primary 0 of 100, fallback 0 of 100"},
		{served("primary", 60), true, promiseAllBackends, "primary 61 of 100, fallback 1 of 100"},
		{served("fallback", 60), true, promiseAllBackends, "primary 122 of 100 exceeded, fallback 2 of 100 has room"},
		{served("fallback", 60), true, promiseAllBackends, "primary exceeded, fallback 63 of 100 has room"},
		{served("fallback", 1), false, promiseAllBackends, "primary over 100, fallback 124 of 100: all exceeded"},
	})
}

// TestQuotaAcrossModels: one route whose backend serves two models, the
// second a fallback for the first, with a budget each: a 429 only when both
// are exceeded.
func TestQuotaAcrossModels(t *testing.T) {
	t.Parallel()
	tr := aiGateway(t, resources(backend("openai"), `apiVersion: aigateway.envoyproxy.io/v1beta1
kind: AIGatewayRoute
metadata: {name: chat, namespace: default}
spec:
  rules:
    - matches: [{headers: [{type: Exact, name: x-ai-eg-model, value: gpt-4o}]}]
      backendRefs:
        - {name: openai, modelNameOverride: gpt-4o, priority: 0}
        - {name: openai, modelNameOverride: gpt-4o-mini, priority: 1}
`, `apiVersion: aigateway.envoyproxy.io/v1alpha1
kind: QuotaPolicy
metadata: {name: models, namespace: default}
spec:
  targetRefs: [{group: aigateway.envoyproxy.io, kind: AIServiceBackend, name: openai}]
  perModelQuotas:
    - modelName: gpt-4o
      quota:
        defaultBucket: {limit: 100, duration: "1d"}
    - modelName: gpt-4o-mini
      quota:
        defaultBucket: {limit: 200, duration: "1d"}
`))
	d := deploy(t, tr, asAIGatewayDeploysIt())
	served := func(model string, tokens uint64) call {
		return call{route: "default/chat/0", backend: "default/openai", model: model, tokens: tokens}
	}
	d.play(t, []step{
		{served("gpt-4o", 60), true, promiseAllBuckets, "gpt-4o 0 of 100, gpt-4o-mini 0 of 200"},
		{served("gpt-4o", 60), true, promiseAllBuckets, "gpt-4o 61 of 100"},
		{served("gpt-4o-mini", 60), true, promiseAllBuckets, "gpt-4o 122 of 100 exceeded, gpt-4o-mini 2 of 200 has room"},
		{served("gpt-4o-mini", 100), true, promiseAllBuckets, "gpt-4o-mini 63 of 200 has room"},
		{served("gpt-4o-mini", 50), true, promiseAllBuckets, "gpt-4o-mini 164 of 200 has room"},
		{served("gpt-4o-mini", 1), false, promiseAllBuckets, "gpt-4o over 100, gpt-4o-mini 215 of 200: all exceeded"},
	})
}

// TestStartedAsAIGatewayDeploysIt: AI Gateway's manifest starts the rate
// limit service with an argument (--quotaRateLimitServiceAddr, its
// controller's flag) that envoyproxy/ratelimit ignores.
func TestStartedAsAIGatewayDeploysIt(t *testing.T) {
	t.Parallel()
	tr := aiGateway(t, resources(backend("openai"), `apiVersion: aigateway.envoyproxy.io/v1beta1
kind: AIGatewayRoute
metadata: {name: chat, namespace: default}
spec:
  rules:
    - matches: [{headers: [{type: Exact, name: x-ai-eg-model, value: gpt-4}]}]
      backendRefs: [{name: openai, modelNameOverride: gpt-4}]
`, `apiVersion: aigateway.envoyproxy.io/v1alpha1
kind: QuotaPolicy
metadata: {name: models, namespace: default}
spec:
  targetRefs: [{group: aigateway.envoyproxy.io, kind: AIServiceBackend, name: openai}]
  perModelQuotas:
    - modelName: gpt-4
      quota:
        defaultBucket: {limit: 100, duration: "1d"}
`))
	d := deploy(t, tr, asAIGatewayDeploysIt("--quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-gateway-system"))
	d.play(t, []step{
		{call{route: "default/chat/0", backend: "default/openai", model: "gpt-4", tokens: 10}, true, promiseAllBuckets, "0 of 100 used"},
	})
}

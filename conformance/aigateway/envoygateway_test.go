package aigateway

import (
	"fmt"
	"testing"
)

// Envoy Gateway's resources for AI Gateway's token rate limits: a
// GatewayClass and Gateway, and an HTTPRoute to an LLM backend's Service
// (what AI Gateway's controller makes of an AIGatewayRoute).
const egGateway = `apiVersion: v1
kind: Namespace
metadata: {name: default}
---
apiVersion: v1
kind: Service
metadata: {name: llm, namespace: default}
spec:
  clusterIP: 10.96.1.2
  ports: [{name: http, port: 80, protocol: TCP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: envoy-ai-gateway}
spec: {controllerName: gateway.envoyproxy.io/gatewayclass-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: envoy-ai-gateway-token-ratelimit, namespace: default}
spec:
  gatewayClassName: envoy-ai-gateway
  listeners: [{name: http, protocol: HTTP, port: 80}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: chat, namespace: default}
spec:
  parentRefs: [{name: envoy-ai-gateway-token-ratelimit}]
  rules:
    - backendRefs: [{name: llm, port: 80}]
`

// The promises of AI Gateway's usage-based rate limiting
// (site/docs/capabilities/traffic/usage-based-ratelimiting.md, v1.0.0),
// which Envoy Gateway's BackendTrafficPolicy carries out.
const (
	promiseTokenCheck   = "The check for whether the total count has reached the limit happens during each request. [...] If the limit would be exceeded, the request is rejected with a 429 status code"
	promiseTokenCounted = "If within the limit, the request is processed and its token usage is counted towards the total"
	promiseCostZero     = "Always set the request cost number to 0 to ensure only token usage counts towards the limit"
	promisePerModelRule = "different models have different token limits based on their costs"
	promiseMultiple     = "You can configure multiple rate limit rules for the same user-model combination. For example: - Limit total tokens per hour - Separate limits for input and output tokens"
)

// TestTokenRateLimitThroughEnvoyGateway: the documentation's "Cost-Based
// Model Rate Limiting" BackendTrafficPolicy (per tenant, 1000 tokens for
// gpt-4, 5000 for gpt-3.5-turbo; per day here instead of per hour, so that
// the case runs in one window), translated by Envoy Gateway: the request
// path sends each descriptor with hits_addend 0 (a check), the stream-done
// entry the response's total tokens.
func TestTokenRateLimitThroughEnvoyGateway(t *testing.T) {
	t.Parallel()
	tr := envoyGateway(t, resources(egGateway, `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: model-specific-token-limit-policy, namespace: default}
spec:
  targetRefs: [{name: envoy-ai-gateway-token-ratelimit, kind: Gateway, group: gateway.networking.k8s.io}]
  rateLimit:
    type: Global
    global:
      rules:
        - clientSelectors:
            - headers:
                - {name: x-tenant-id, type: Distinct}
                - {name: x-ai-eg-model, type: Exact, value: gpt-4}
          limit: {requests: 1000, unit: Day}
          cost:
            request: {from: Number, number: 0}
            response:
              from: Metadata
              metadata: {namespace: io.envoy.ai_gateway, key: llm_total_token}
        - clientSelectors:
            - headers:
                - {name: x-tenant-id, type: Distinct}
                - {name: x-ai-eg-model, type: Exact, value: gpt-3.5-turbo}
          limit: {requests: 5000, unit: Day}
          cost:
            request: {from: Number, number: 0}
            response:
              from: Metadata
              metadata: {namespace: io.envoy.ai_gateway, key: llm_total_token}
`))
	d := deploy(t, tr, asEnvoyGatewayDeploysIt())
	route := onlyRoute(t, tr)
	req := func(tenant, model string, tokens uint64) call {
		return call{route: route, headers: map[string]string{"x-tenant-id": tenant, "x-ai-eg-model": model}, backend: "default/llm", model: model, tokens: tokens}
	}
	d.play(t, []step{
		{req("acme", "gpt-4", 600), true, promiseTokenCheck, "acme gpt-4: 0 of 1000 tokens"},
		{req("acme", "gpt-4", 399), true, promiseTokenCheck, "acme gpt-4: 600 of 1000 tokens"},
		{req("acme", "gpt-4", 1), true, promiseCostZero, "acme gpt-4: 999 of 1000 tokens: the checks cost nothing (1001 if each had cost 1)"},
		{req("acme", "gpt-4", 1), false, promiseTokenCheck, "acme gpt-4: 1000 of 1000 tokens: the total has reached the limit"},
		{req("globex", "gpt-4", 900), true, promiseTokenCheck, "globex gpt-4: 0 of 1000 (x-tenant-id is Distinct: a budget per tenant)"},
		{req("acme", "gpt-3.5-turbo", 4000), true, promisePerModelRule, "acme gpt-3.5-turbo: 0 of 5000, a rule of its own"},
		{req("globex", "gpt-4", 500), true, promiseTokenCounted, "globex gpt-4: 900 of 1000: within the limit, processed, and its 500 tokens counted (1400)"},
		{req("globex", "gpt-4", 1), false, promiseTokenCheck, "globex gpt-4: 1400 of 1000"},
		{req("acme", "gpt-3.5-turbo", 1), true, promisePerModelRule, "acme gpt-3.5-turbo: 4000 of 5000"},
	})
}

// TestTokenRateLimitsOfOneTenantAndModel: two token limits on the same
// tenant and model (total tokens, and output tokens apart), through Envoy
// Gateway: a request is a 429 once either has reached its limit.
func TestTokenRateLimitsOfOneTenantAndModel(t *testing.T) {
	t.Parallel()
	rule := func(limit int, key string) string {
		return fmt.Sprintf(`        - clientSelectors:
            - headers:
                - {name: x-tenant-id, type: Distinct}
                - {name: x-ai-eg-model, type: Exact, value: gpt-4}
          limit: {requests: %d, unit: Day}
          cost:
            request: {from: Number, number: 0}
            response:
              from: Metadata
              metadata: {namespace: io.envoy.ai_gateway, key: %s}
`, limit, key)
	}
	tr := envoyGateway(t, resources(egGateway, `apiVersion: gateway.envoyproxy.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: token-limits, namespace: default}
spec:
  targetRefs: [{name: envoy-ai-gateway-token-ratelimit, kind: Gateway, group: gateway.networking.k8s.io}]
  rateLimit:
    type: Global
    global:
      rules:
`+rule(1000, "llm_total_token")+rule(300, "llm_output_token")))
	d := deploy(t, tr, asEnvoyGatewayDeploysIt())
	route := onlyRoute(t, tr)
	req := func(input, output uint64) call {
		return call{route: route, headers: map[string]string{"x-tenant-id": "acme", "x-ai-eg-model": "gpt-4"},
			backend: "default/llm", model: "gpt-4", tokens: input + output, inputTokens: input, outputTokens: output}
	}
	d.play(t, []step{
		{req(100, 200), true, promiseMultiple, "total 0 of 1000, output 0 of 300"},
		{req(100, 99), true, promiseMultiple, "total 300 of 1000, output 200 of 300"},
		{req(100, 1), true, promiseMultiple, "total 499 of 1000, output 299 of 300"},
		{req(100, 1), false, promiseTokenCheck, "output 300 of 300 has reached its limit, though the total (600 of 1000) has room"},
		{req(1, 0), false, promiseTokenCheck, "output still 300 of 300"},
	})
}

// onlyRoute is the key of the one Envoy route with a rate limit (the
// HTTPRoute's one rule).
func onlyRoute(t *testing.T, tr translation) string {
	t.Helper()
	if len(tr.routes) != 1 {
		t.Fatalf("routes with a rate limit: %v, want the HTTPRoute's one", keys(tr.routes))
	}
	return keys(tr.routes)[0]
}

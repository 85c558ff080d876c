//go:build aigatewaydriver

// Command aigwdriver runs Envoy AI Gateway's own QuotaPolicy code over the
// resources a user writes and prints what it makes, for the conformance
// suite. It is not built as part of this module: the suite compiles it as a
// package of github.com/envoyproxy/ai-gateway (go build -overlay), because
// the code it calls lives in that module's internal/ tree, which no other
// module may import. See README.md.
//
// Input (stdin): YAML documents, as a user applies them: AIServiceBackend and
// AIGatewayRoute (aigateway.envoyproxy.io/v1beta1) and QuotaPolicy
// (aigateway.envoyproxy.io/v1alpha1).
//
// Output (stdout): one JSON object,
//
//	{"rateLimitConfigs": [RateLimitConfig...],          // what the controller pushes over xDS
//	 "routes": {"NAMESPACE/ROUTE/RULE": RateLimitPerRoute}}  // what the extension server puts on each Envoy route
//
// each message in protojson.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"

	egextension "github.com/envoyproxy/gateway/proto/extension"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/go-logr/logr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/yaml"

	aigv1a1 "github.com/envoyproxy/ai-gateway/api/v1alpha1"
	aigv1b1 "github.com/envoyproxy/ai-gateway/api/v1beta1"
	"github.com/envoyproxy/ai-gateway/internal/extensionserver"
	"github.com/envoyproxy/ai-gateway/internal/internalapi"
	"github.com/envoyproxy/ai-gateway/internal/ratelimit/translator"
)

// quotaFilterName is the per-route filter config key the extension server
// writes (extensionserver.quotaRateLimitFilterName, unexported).
const quotaFilterName = "envoy.filters.http.ratelimit/ai-gateway-quota"

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "aigwdriver:", err)
		os.Exit(1)
	}
}

type output struct {
	RateLimitConfigs []json.RawMessage          `json:"rateLimitConfigs"`
	Routes           map[string]json.RawMessage `json:"routes"`
}

func run(in io.Reader, out io.Writer) error {
	var (
		policies []*aigv1a1.QuotaPolicy
		backends []*aigv1b1.AIServiceBackend
		routes   []*aigv1b1.AIGatewayRoute
	)
	dec := utilyaml.NewYAMLReader(bufio.NewReader(in))
	for {
		doc, err := dec.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return err
		}
		switch meta.Kind {
		case "QuotaPolicy":
			p := &aigv1a1.QuotaPolicy{}
			if err := yaml.UnmarshalStrict(doc, p); err != nil {
				return fmt.Errorf("QuotaPolicy: %w", err)
			}
			policies = append(policies, p)
		case "AIServiceBackend":
			b := &aigv1b1.AIServiceBackend{}
			if err := yaml.UnmarshalStrict(doc, b); err != nil {
				return fmt.Errorf("AIServiceBackend: %w", err)
			}
			backends = append(backends, b)
		case "AIGatewayRoute":
			r := &aigv1b1.AIGatewayRoute{}
			if err := yaml.UnmarshalStrict(doc, r); err != nil {
				return fmt.Errorf("AIGatewayRoute: %w", err)
			}
			routes = append(routes, r)
		default:
			return fmt.Errorf("unexpected kind %q", meta.Kind)
		}
	}

	configs, err := rateLimitConfigs(policies, backends)
	if err != nil {
		return err
	}
	perRoute, err := routeRateLimits(policies, backends, routes)
	if err != nil {
		return err
	}
	o := output{Routes: map[string]json.RawMessage{}}
	for _, c := range configs {
		b, err := protojson.Marshal(c)
		if err != nil {
			return err
		}
		o.RateLimitConfigs = append(o.RateLimitConfigs, b)
	}
	for k, v := range perRoute {
		b, err := protojson.Marshal(v)
		if err != nil {
			return err
		}
		o.Routes[k] = b
	}
	return json.NewEncoder(out).Encode(o)
}

// rateLimitConfigs is what the QuotaPolicy controller pushes to the rate
// limit service: translator.BuildRateLimitConfigs for each policy over the
// AIServiceBackends its targetRefs name in its namespace
// (QuotaPolicyController.syncQuotaPolicy), then every policy's descriptors in
// the order of "namespace/name", merged by translator.MergeDescriptors into
// one RateLimitConfig (QuotaPolicyController.getMergedConfigsLocked).
func rateLimitConfigs(policies []*aigv1a1.QuotaPolicy, backends []*aigv1b1.AIServiceBackend) ([]*rlsconfv3.RateLimitConfig, error) {
	perPolicy := map[string][]*rlsconfv3.RateLimitConfig{}
	for _, p := range policies {
		var targets []*aigv1b1.AIServiceBackend
		for _, ref := range p.Spec.TargetRefs {
			for _, b := range backends {
				if b.Namespace == p.Namespace && b.Name == string(ref.Name) {
					targets = append(targets, b)
				}
			}
		}
		cfgs, err := translator.BuildRateLimitConfigs(p, targets)
		if err != nil {
			return nil, fmt.Errorf("QuotaPolicy %s/%s: %w", p.Namespace, p.Name, err)
		}
		perPolicy[p.Namespace+"/"+p.Name] = cfgs
	}
	keys := make([]string, 0, len(perPolicy))
	for k := range perPolicy {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var all []*rlsconfv3.RateLimitDescriptor
	for _, k := range keys {
		for _, c := range perPolicy[k] {
			all = append(all, c.Descriptors...)
		}
	}
	if len(all) == 0 {
		return nil, nil
	}
	return []*rlsconfv3.RateLimitConfig{{
		Name:        translator.QuotaDomain,
		Domain:      translator.QuotaDomain,
		Descriptors: translator.MergeDescriptors(all),
	}}, nil
}

// routeRateLimits runs the extension server's PostTranslateModify hook, as
// Envoy Gateway calls it, over one Envoy route per AIGatewayRoute rule shaped
// as Envoy Gateway makes it (cluster "httproute/NS/NAME/rule/I", the
// envoy-gateway route metadata naming the generated HTTPRoute), and returns
// the RateLimitPerRoute the hook put on each.
func routeRateLimits(policies []*aigv1a1.QuotaPolicy, backends []*aigv1b1.AIServiceBackend, routes []*aigv1b1.AIGatewayRoute) (map[string]*ratelimitfilterv3.RateLimitPerRoute, error) {
	scheme := runtime.NewScheme()
	if err := aigv1a1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := aigv1b1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	var objs []client.Object
	for i, p := range policies {
		if p.UID == "" { // the API server gives every object one; policiesForRoute deduplicates by it
			p.UID = types.UID("quotapolicy-" + strconv.Itoa(i))
		}
		objs = append(objs, p)
	}
	for _, b := range backends {
		objs = append(objs, b)
	}
	for _, r := range routes {
		objs = append(objs, r)
	}
	k8s := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	srv, err := extensionserver.New(k8s, logr.Discard(), "/tmp/extproc.sock", false, nil, nil,
		"envoy-ai-gateway-ratelimit.envoy-gateway-system", 5, false)
	if err != nil {
		return nil, err
	}

	rc := &routev3.RouteConfiguration{Name: "default/gateway/http"}
	vh := &routev3.VirtualHost{Name: "gateway/*", Domains: []string{"*"}}
	keys := map[*routev3.Route]string{}
	for _, r := range routes {
		for i := range r.Spec.Rules {
			key := r.Namespace + "/" + r.Name + "/" + strconv.Itoa(i)
			route := &routev3.Route{
				Name: fmt.Sprintf("httproute/%s/%s/rule/%d/match/0/*", r.Namespace, r.Name, i),
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{
					ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: fmt.Sprintf("httproute/%s/%s/rule/%d", r.Namespace, r.Name, i)},
				}},
				Metadata: envoyGatewayRouteMetadata(r),
			}
			vh.Routes = append(vh.Routes, route)
			keys[route] = key
		}
	}
	rc.VirtualHosts = []*routev3.VirtualHost{vh}
	resp, err := srv.PostTranslateModify(context.Background(), &egextension.PostTranslateModifyRequest{
		Routes: []*routev3.RouteConfiguration{rc},
	})
	if err != nil {
		return nil, err
	}
	outRoutes := map[string]*ratelimitfilterv3.RateLimitPerRoute{}
	for _, rc := range resp.Routes {
		for _, vh := range rc.VirtualHosts {
			for _, route := range vh.Routes {
				a, ok := route.TypedPerFilterConfig[quotaFilterName]
				if !ok {
					continue
				}
				pr := &ratelimitfilterv3.RateLimitPerRoute{}
				if err := a.UnmarshalTo(pr); err != nil {
					return nil, err
				}
				outRoutes[keys[route]] = pr
			}
		}
	}
	return outRoutes, nil
}

// envoyGatewayRouteMetadata is the route metadata Envoy Gateway writes for a
// route of the HTTPRoute the AI Gateway controller generates from r (it has
// the same name and the ai-gateway-generated annotation).
func envoyGatewayRouteMetadata(r *aigv1b1.AIGatewayRoute) *corev3.Metadata {
	s, err := structpb.NewStruct(map[string]any{
		"resources": []any{map[string]any{
			"kind":        "HTTPRoute",
			"name":        r.Name,
			"namespace":   r.Namespace,
			"annotations": map[string]any{internalapi.AIGatewayGeneratedHTTPRouteAnnotation: "true"},
		}},
	})
	if err != nil {
		panic(err)
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy-gateway": s}}
}

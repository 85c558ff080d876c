//go:build envoygatewaydriver

// Command egdriver runs Envoy Gateway's own translators over the Gateway
// API resources a user writes and prints what they make, for the
// conformance suite. Like aigwdriver, it is compiled as a package of its
// module, github.com/envoyproxy/gateway, whose translators are internal
// (see README.md).
//
// Input (stdin): Kubernetes YAML: a GatewayClass, Gateways, HTTPRoutes,
// BackendTrafficPolicies, Services, Namespaces. They get the defaults of
// the CRDs' schemas (Envoy Gateway's defaulter), are decoded into its types
// and handed to its translator as its provider hands what the API server
// holds. egctl's loader is not used: it also checks each object against
// the CRDs, with the Kubernetes libraries this module pins, newer than
// Envoy Gateway's, and they reject its CRDs' int32 bounds; the API server
// checks objects at admission, not the translator.
//
// Output (stdout): the same JSON as aigwdriver's,
//
//	{"rateLimitConfigs": [RateLimitConfig...],           // what Envoy Gateway's rate limit xDS server serves
//	 "routes": {"ENVOY ROUTE NAME": RateLimitPerRoute}}  // the rate limit filter's configuration on each route
//
// each message in protojson.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protojson"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	"github.com/envoyproxy/gateway/internal/gatewayapi"
	"github.com/envoyproxy/gateway/internal/gatewayapi/resource"
	"github.com/envoyproxy/gateway/internal/logging"
	"github.com/envoyproxy/gateway/internal/xds/translator"
)

// rateLimitFilter is the name of the global rate limit filter's per-route
// configuration for a route's own (not shared) rules.
var rateLimitFilter = egv1a1.EnvoyFilterRateLimit.String()

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "egdriver:", err)
		os.Exit(1)
	}
}

// load decodes the YAML documents of in into Envoy Gateway's resources.
func load(in io.Reader) (*resource.Resources, error) {
	r := resource.NewResources()
	dec := utilyaml.NewYAMLReader(bufio.NewReader(in))
	for {
		doc, err := dec.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, err
		}
		var obj any
		switch meta.Kind {
		case "GatewayClass":
			r.GatewayClass = &gwapiv1.GatewayClass{}
			obj = r.GatewayClass
		case "Gateway":
			g := &gwapiv1.Gateway{}
			r.Gateways, obj = append(r.Gateways, g), g
		case "HTTPRoute":
			h := &gwapiv1.HTTPRoute{}
			r.HTTPRoutes, obj = append(r.HTTPRoutes, h), h
		case "BackendTrafficPolicy":
			p := &egv1a1.BackendTrafficPolicy{}
			r.BackendTrafficPolicies, obj = append(r.BackendTrafficPolicies, p), p
		case "Service":
			s := &corev1.Service{}
			r.Services, obj = append(r.Services, s), s
		case "Namespace":
			n := &corev1.Namespace{}
			r.Namespaces, obj = append(r.Namespaces, n), n
		default:
			return nil, fmt.Errorf("unexpected kind %q", meta.Kind)
		}
		// The defaults of the CRDs' schemas, which the API server applies
		// to what a user applies (egctl's loader applies them too).
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, err
		}
		un := &unstructured.Unstructured{Object: m}
		if g := un.GroupVersionKind().Group; g == egv1a1.GroupName || g == gwapiv1.GroupName {
			if un, err = resource.GetGatewaySchemaDefaulter().ApplyDefault(un); err != nil {
				return nil, fmt.Errorf("%s: defaults: %w", meta.Kind, err)
			}
		}
		defaulted, err := json.Marshal(un.Object)
		if err != nil {
			return nil, err
		}
		if err := yaml.UnmarshalStrict(defaulted, obj); err != nil {
			return nil, fmt.Errorf("%s: %w", meta.Kind, err)
		}
	}
	if r.GatewayClass == nil {
		return nil, fmt.Errorf("no GatewayClass")
	}
	r.Sort()
	return r, nil
}

func run(in io.Reader, out io.Writer) error {
	resources, err := load(in)
	if err != nil {
		return err
	}
	// Gateway API to IR, as Envoy Gateway's gateway-api runner does with
	// global rate limits enabled.
	gt := &gatewayapi.Translator{
		GatewayControllerName:   string(resources.GatewayClass.Spec.ControllerName),
		GatewayClassName:        gwapiv1.ObjectName(resources.GatewayClass.Name),
		GlobalRateLimitEnabled:  true,
		EndpointRoutingDisabled: true,
		BackendEnabled:          true,
		Logger:                  logging.DefaultLogger(io.Discard, egv1a1.LogLevelInfo),
	}
	// Errors of a partial translation are reported and the result used,
	// as Envoy Gateway's gateway-api runner and egctl do (here: the
	// envoy TLS secret of the control plane's own deployment is missing).
	result, err := gt.Translate(resources)
	if err != nil {
		fmt.Fprintln(os.Stderr, "egdriver: gateway API translation:", err)
	}
	if result == nil {
		return fmt.Errorf("gateway API translation made nothing")
	}
	keys := make([]string, 0, len(result.XdsIR))
	for k := range result.XdsIR {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	o := struct {
		RateLimitConfigs []json.RawMessage          `json:"rateLimitConfigs"`
		Routes           map[string]json.RawMessage `json:"routes"`
	}{Routes: map[string]json.RawMessage{}}
	for _, k := range keys {
		x := result.XdsIR[k]
		// What the global rate limit runner serves over xDS
		// (internal/globalratelimit/runner: translate).
		for _, c := range translator.BuildRateLimitServiceConfig(x.HTTP) {
			b, err := protojson.Marshal(c)
			if err != nil {
				return err
			}
			o.RateLimitConfigs = append(o.RateLimitConfigs, b)
		}
		// What the xDS translator puts on Envoy's routes.
		xt := &translator.Translator{
			GlobalRateLimit: &translator.GlobalRateLimitSettings{ServiceURL: "grpc://envoy-ratelimit.envoy-gateway-system.svc.cluster.local:8081"},
			Logger:          logging.DefaultLogger(io.Discard, egv1a1.LogLevelInfo),
		}
		rvt, err := xt.Translate(x)
		if err != nil {
			return fmt.Errorf("xDS translation of %s: %w", k, err)
		}
		for _, r := range rvt.XdsResources[resourcev3.RouteType] {
			rc, ok := r.(*routev3.RouteConfiguration)
			if !ok {
				continue
			}
			for _, vh := range rc.VirtualHosts {
				for _, route := range vh.Routes {
					if len(route.GetRoute().GetRateLimits()) > 0 {
						return fmt.Errorf("route %s: shared rate limit rules (on the route action) are not played", route.Name)
					}
					a, ok := route.TypedPerFilterConfig[rateLimitFilter]
					if !ok {
						continue
					}
					pr := &ratelimitfilterv3.RateLimitPerRoute{}
					if err := a.UnmarshalTo(pr); err != nil {
						return err
					}
					b, err := protojson.Marshal(pr)
					if err != nil {
						return err
					}
					o.Routes[route.Name] = b
				}
			}
		}
	}
	return json.NewEncoder(out).Encode(o)
}

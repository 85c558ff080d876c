// Package client asks a ratelimitd service, over gRPC, whether requests may
// go through. Its subpackages put it in front of handlers: httplimit is
// net/http middleware, grpclimit holds gRPC server interceptors.
//
// A request is named by a domain and descriptors, each a list of entries
// from the most general to the most specific:
//
//	c, err := client.New("127.0.0.1:8081")
//	...
//	orders := client.NewDescriptor("path", "/orders")
//	d, err := c.Charge(ctx, "default",
//		client.NewDescriptor("generic_key", "global"),
//		orders,
//		orders.With("user", "alice"))
//	if err != nil {
//		return err // ctx ended before a decision
//	}
//	if !d.Allowed {
//		return fmt.Errorf("%v", d) // throttled by policy 'per-user-per-endpoint'; retry after 100 ms
//	}
//
// The service charges every descriptor or, when any denies, none. Charge
// is named for what it does: it spends the budget it asks about. To ask
// without spending, give a descriptor WithOperation(OPERATION_CHECK).
//
// # Usage known afterwards
//
// Work whose cost is known only when it is done (the tokens of an LLM
// answer) reserves an estimate first and settles for the actual cost:
//
//	r, err := c.Reserve(ctx, 500, "llm", client.NewDescriptor("tenant", "acme"))
//	...
//	if !r.Allowed {
//		return fmt.Errorf("%v", r.Decision) // the budget has no 500 tokens left
//	}
//	used := callTheModel()
//	r.Settle(ctx, used) // charges used-500 in full (into debt if need be), or refunds 500-used
//
// Cancel gives a reservation back. Descriptor.WithOperation asks a single
// check or refund directly, and Descriptor.WithOverdraft says whether a
// charge may overdraw whatever the policy says. A refund (Cancel, or Settle
// for less than the estimate) needs the verb refund where the service
// authorizes its callers, and a rule with refunds: false refuses it from
// anyone: a refused refund is answered PermissionDenied, which the failure
// policy decides like any error, and the reservation stays open
// (docs/authz.md).
//
// # Work in flight
//
// A concurrency limit (a policy's algorithm: concurrency) counts units in
// flight: Acquire takes them and Lease.Release gives them back, and a unit
// never released frees itself when its lease ends:
//
//	lease, err := c.Acquire(ctx, "llm", client.NewDescriptor("tenant", "acme"))
//	...
//	if !lease.Allowed {
//		return fmt.Errorf("%v", lease.Decision) // 20 streams of acme in flight already
//	}
//	defer lease.Release(context.WithoutCancel(ctx))
//
// httplimit.NewConcurrency and grpclimit.NewConcurrency do this around
// each request's handler.
//
// # When the service cannot decide
//
// Each call has a deadline (WithTimeout). A service that is unreachable,
// slower than that, or answering with an error does not fail the request:
// the failure policy decides it — admitted by default (fail open), denied
// with WithFailClosed — and the Decision says so in its Source and Err. Such
// decisions are never silent: each is passed to the WithFailureHook hook
// (count them there), and the log says when the service stops and starts
// answering.
//
// # Local short-circuit
//
// With WithLocalDeny, a request the service denied with a retry time is
// denied by the client itself, without a call, until that time has passed:
// during a flood from one client most of its requests cost the service
// nothing. Only the same request is (same domain, same descriptors in the
// same order, each with the same entries, cost and inline limit): the
// service's verdict on a descriptor depends on the whole request. It is off
// by default and bounded in size.
package client

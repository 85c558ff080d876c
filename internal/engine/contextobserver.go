package engine

import "context"

// ContextObserver is told about each request the engine decides, with the
// call's context, under the same rules as an Observer and right after it:
// the hook for what belongs to the call rather than to the daemon, such as
// its trace span.
type ContextObserver func(ctx context.Context, req *Request, resp *Response)

// WithContextObserver sets the engine's context observer (none by
// default).
func WithContextObserver(o ContextObserver) Option { return func(e *Engine) { e.contextObserver = o } }

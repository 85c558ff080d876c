package config

import (
	_ "embed"
	"sync"
)

// defaultSource is the Source of the default policy's domain.
const defaultSource = "embedded:default.yaml"

//go:embed default.yaml
var defaultYAML []byte

var defaultPolicy = sync.OnceValue(func() *Policy {
	p, err := Parse(defaultSource, defaultYAML)
	if err != nil {
		panic("config: the embedded default policy is invalid:\n" + err.Error())
	}
	return p
})

// Default returns the embedded default policy (default.yaml): the domain
// "default" with three token-bucket tiers of a web API, each matched by one
// descriptor of a request:
//
//	[generic_key=global]       global: burst 7000, 6000 per minute
//	[path=P]                   per-endpoint: burst 4000, 3000 per minute, a bucket per path
//	[path=P, user=U]           per-user-per-endpoint: burst 800, 600 per minute, a bucket per path and user
//
// It is parsed on first use; the same *Policy is returned every time.
// Default never fails: the package's tests parse the embedded file.
func Default() *Policy { return defaultPolicy() }

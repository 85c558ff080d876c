package topdenied

import (
	"sync/atomic"
	"unsafe"

	"github.com/ratelimitd/ratelimitd/internal/engine"
	"github.com/ratelimitd/ratelimitd/internal/policy/config"
)

// ruleCacheSize is how many rules' hashes a Tracker remembers (a power of
// two).
const ruleCacheSize = 64

// ruleCache remembers, for rules lately denied, the hash of a rule's
// domain and keys, so that a denial hashes only its values. Every
// descriptor a rule matches has the same domain and keys (config matches
// a descriptor key by key down the rule's path, and a rule belongs to one
// domain), so that hash is the rule's own. Each place holds one rule,
// chosen by the rule's address (rules are allocated one by one, tens of
// bytes apart, so the bits above an address's lowest four spread them);
// another rule at the same place takes it over. A place pins its rule
// (and that rule's limits) in memory until then, a policy reload
// notwithstanding: at most ruleCacheSize rules.
//
// A place is a sequence lock: readers take its rule and hash when its
// sequence was even and unchanged around reading them; a writer makes the
// sequence odd while it writes, and a writer that finds it odd leaves the
// place alone. Nothing waits, nothing allocates.
type ruleCache [ruleCacheSize]rulePlace

type rulePlace struct {
	seq  atomic.Uint64
	rule atomic.Pointer[config.Rule]
	hash atomic.Uint64
}

// ruleHash returns the hash of rule's domain and keys, from the cache or
// computed from domain and d's keys (and then cached).
func (t *Tracker) ruleHash(domain string, d *engine.Descriptor, rule *config.Rule) uint64 {
	p := &t.rules[uintptr(unsafe.Pointer(rule))>>4&(ruleCacheSize-1)]
	seq := p.seq.Load()
	if seq&1 == 0 && p.rule.Load() == rule {
		h := p.hash.Load()
		if p.seq.Load() == seq {
			return h
		}
	}
	return t.ruleMiss(p, seq, domain, d, rule)
}

// ruleMiss hashes rule's domain and keys and caches the hash at p, whose
// sequence was seq, unless another writer is there.
func (t *Tracker) ruleMiss(p *rulePlace, seq uint64, domain string, d *engine.Descriptor, rule *config.Rule) uint64 {
	h := t.key.part(1, domain)
	for _, e := range d.Entries {
		h = t.key.part(h, e.Key)
	}
	if seq&1 == 0 && p.seq.CompareAndSwap(seq, seq+1) {
		p.rule.Store(rule)
		p.hash.Store(h)
		p.seq.Store(seq + 2)
	}
	return h
}

package config

import "strings"

// node is one descriptor of a policy file, and the level of descriptors
// nested under it. The domain's root node has no rule and holds the
// top-level descriptors.
type node struct {
	rule   *Rule // nil for a descriptor without rate_limit or rate_limits
	shared bool  // share_threshold: its wildcard's values share buckets

	// The descriptors one level down, by how they match an entry.
	exact    map[Entry]*node  // key and value, value without a *
	wildcard []wildcard       // key and value with a *, in file order
	keyOnly  map[string]*node // key without value
}

// wildcard is a descriptor whose value holds a *: it matches an entry with
// its key whose value the pattern matches (see matches).
type wildcard struct {
	key   string
	value string   // as written
	parts []string // value split at each *: one more than there are *s
	n     *node
}

func newWildcard(key, value string, n *node) wildcard {
	return wildcard{key: key, value: value, parts: strings.Split(value, "*"), n: n}
}

// matches reports whether v matches the pattern, where each * stands for
// any run of bytes, the empty one included: v starts with the part before
// the first *, ends with the part after the last, and holds the parts
// between, in order and without overlapping, in what is left. "a*" is a
// prefix, "*a" a suffix, "*" anything; it does not allocate.
func (w *wildcard) matches(v string) bool {
	first, last := w.parts[0], w.parts[len(w.parts)-1]
	if len(v) < len(first)+len(last) || !strings.HasPrefix(v, first) || !strings.HasSuffix(v, last) {
		return false
	}
	rest := v[len(first) : len(v)-len(last)]
	for _, p := range w.parts[1 : len(w.parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):] // leftmost is best: it leaves the most for the parts after
	}
	return true
}

// hasChildren reports whether the node has nested descriptors.
func (n *node) hasChildren() bool {
	return len(n.exact) > 0 || len(n.wildcard) > 0 || len(n.keyOnly) > 0
}

// child returns the descriptor one level down that e selects: the one with
// e's key and value, else the first wildcard (in file order) with e's key
// whose pattern matches e's value, else the one with e's key and no value;
// nil when there is none.
func (n *node) child(e Entry) *node {
	if c := n.exact[e]; c != nil {
		return c
	}
	for i := range n.wildcard {
		w := &n.wildcard[i]
		if w.key == e.Key && w.matches(e.Value) {
			return w.n
		}
	}
	return n.keyOnly[e.Key]
}

// Match returns the rule that a descriptor with these entries matches, or
// nil when none does (and for a nil Domain or no entries).
//
// Entry i is matched against the descriptors at depth i of the tree, under
// the descriptor that entry i-1 selected. At each depth the entry selects
// one descriptor, the most specific there is:
//
//  1. the descriptor with the entry's key and value;
//  2. else the first descriptor, in file order, with the entry's key and a
//     wildcard value (one holding a *, each * standing for any run of
//     bytes) that matches the entry's value;
//  3. else the descriptor with the entry's key and no value.
//
// The descriptor the last entry selects is the match if it has a limit.
// Nothing else matches: when an entry selects no descriptor, when the
// descriptors end before the entries do (the request is deeper than the
// policy), or when the last entry's descriptor has no limit (the request is
// shallower than the policy, or the descriptor has none), Match returns
// nil. A choice made at one depth is never revisited: a less specific
// descriptor at that depth is not tried when the chosen one fails deeper.
//
// Match does not allocate and is safe for concurrent use.
func (d *Domain) Match(entries []Entry) *Rule {
	if d == nil || len(entries) == 0 {
		return nil
	}
	n := &d.root
	for _, e := range entries {
		if !n.hasChildren() {
			return nil // the request is deeper than the policy
		}
		if n = n.child(e); n == nil {
			return nil
		}
	}
	return n.rule
}

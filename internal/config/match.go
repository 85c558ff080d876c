package config

import "strings"

// node is one descriptor of a policy file, and the level of descriptors
// nested under it. The domain's root node has no rule and holds the
// top-level descriptors.
type node struct {
	rule   *Rule // nil for a descriptor without rate_limit or rate_limits
	shared bool  // share_threshold: its wildcard's values share buckets

	// The descriptors one level down, by how they match an entry.
	exact    map[Entry]*node  // key and value, value without a trailing *
	wildcard []wildcard       // key and value ending in *, in file order
	keyOnly  map[string]*node // key without value
}

// wildcard is a descriptor whose value ends in *: it matches an entry with
// its key whose value starts with prefix (the value without the *).
type wildcard struct {
	key, prefix string
	n           *node
}

// hasChildren reports whether the node has nested descriptors.
func (n *node) hasChildren() bool {
	return len(n.exact) > 0 || len(n.wildcard) > 0 || len(n.keyOnly) > 0
}

// child returns the descriptor one level down that e selects: the one with
// e's key and value, else the first wildcard (in file order) with e's key
// whose prefix starts e's value, else the one with e's key and no value;
// nil when there is none.
func (n *node) child(e Entry) *node {
	if c := n.exact[e]; c != nil {
		return c
	}
	for i := range n.wildcard {
		w := &n.wildcard[i]
		if w.key == e.Key && strings.HasPrefix(e.Value, w.prefix) {
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
//     wildcard value (one ending in *) whose part before the * begins the
//     entry's value;
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

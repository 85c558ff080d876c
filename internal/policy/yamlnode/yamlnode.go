// Package yamlnode reads the nodes of a go.yaml.in/yaml/v3 document the way
// ratelimitd's file parsers do (policy files in internal/policy/config,
// authorization policies in internal/api/authz): it follows aliases, says what a
// node is in words a problem report can use, and takes mappings, lists and
// strings apart, reporting each node that does not fit through the
// parser's own function and going on, so that one pass finds every problem.
package yamlnode

import (
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Resolve returns the node y stands for: for an alias (*name) whose anchor
// is known, the anchored node (following an alias of an alias to the end);
// otherwise y itself, including a nil y and an alias whose anchor is nil.
func Resolve(y *yaml.Node) *yaml.Node {
	for y != nil && y.Kind == yaml.AliasNode && y.Alias != nil {
		y = y.Alias
	}
	return y
}

// IsNull reports whether y, resolved, is a null scalar (null, ~, Null,
// NULL, or no value at all after a key). A nil y is missing, not null, and
// IsNull returns false for it.
func IsNull(y *yaml.Node) bool {
	y = Resolve(y)
	return y != nil && y.Kind == yaml.ScalarNode && y.ShortTag() == "!!null"
}

// Describe says what y, resolved, is, for a problem report: "nothing" for a
// nil or null y, "a mapping", "a list", a string scalar quoted as
// strconv.Quote quotes it ("abc" with its quotes), any other scalar as
// written (200, true, 1.5), and "something else" for anything else (an alias
// whose anchor is nil).
func Describe(y *yaml.Node) string {
	y = Resolve(y)
	if y == nil {
		return "nothing"
	}
	switch y.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch y.ShortTag() {
		case "!!null":
			return "nothing"
		case "!!str":
			return strconv.Quote(y.Value)
		}
		return y.Value
	}
	return "something else"
}

// Join returns the path of the field name within the field at path: name
// itself at the top of a document (path ""), "path.name" below it.
func Join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// Reader takes the nodes of one document apart for a parser. A problem
// does not stop it: it reports the problem through Errorf, leaves out what
// does not fit and returns the rest. A Reader holds a count of the list
// items it has returned, so one Reader serves one document; the zero value
// is not usable (Errorf is nil).
type Reader struct {
	// Errorf reports a problem with the field at path, whose YAML is n,
	// in the words of fmt.Sprintf(format, args...). n is never nil.
	Errorf func(n *yaml.Node, path, format string, args ...any)

	// MaxItems, when positive, bounds the list items that the calls of
	// List on this Reader return together: a list reached through an alias
	// counts again each time, so that aliases of aliases cannot make a walk
	// of the document exponential. Zero means no bound.
	MaxItems int

	items int // list items returned (or refused) so far
}

// Fields returns the values of the mapping y by key, keys and values
// resolved. A key whose value is null is present, with its null node (never
// a nil one). For a y that is not a mapping it reports a problem naming the
// known keys (and what y is) at path and returns nil. It reports, and leaves
// out, a key that is not a scalar (at path), a key not in known (at
// Join(path, key)), and a key given again (at Join(path, key), naming the
// line of the first, which is kept). y must not be nil.
func (r *Reader) Fields(y *yaml.Node, path string, known []string) map[string]*yaml.Node {
	y = Resolve(y)
	if y.Kind != yaml.MappingNode {
		r.Errorf(y, path, "want a mapping with %s; got %s", strings.Join(known, ", "), Describe(y))
		return nil
	}
	m := make(map[string]*yaml.Node, len(y.Content)/2)
	for i := 0; i+1 < len(y.Content); i += 2 {
		k, v := Resolve(y.Content[i]), Resolve(y.Content[i+1])
		name := k.Value
		if k.Kind != yaml.ScalarNode {
			r.Errorf(k, path, "a key that is %s (want one of %s)", Describe(k), strings.Join(known, ", "))
			continue
		}
		if !slices.Contains(known, name) {
			r.Errorf(k, Join(path, name), "unknown field (want one of %s)", strings.Join(known, ", "))
			continue
		}
		if prev, dup := m[name]; dup {
			r.Errorf(k, Join(path, name), "given twice (first at line %d)", prev.Line)
			continue
		}
		m[name] = v
	}
	return m
}

// List returns the items of the sequence y, each resolved: none for a nil
// or null y; none, with a problem at path, for a y that is not a sequence;
// and, with MaxItems positive, none once the items of this and the earlier
// calls together pass MaxItems. The call that first passes the bound
// reports it at path; the later ones return none without a report.
func (r *Reader) List(y *yaml.Node, path string) []*yaml.Node {
	if y == nil || IsNull(y) {
		return nil
	}
	y = Resolve(y)
	if y.Kind != yaml.SequenceNode {
		r.Errorf(y, path, "want a list; got %s", Describe(y))
		return nil
	}
	if r.MaxItems > 0 {
		if r.items += len(y.Content); r.items > r.MaxItems {
			if r.items-len(y.Content) <= r.MaxItems {
				r.Errorf(y, path, "more than %d list items in the policy (aliases counted each time they are used)", r.MaxItems)
			}
			return nil
		}
	}
	items := make([]*yaml.Node, len(y.Content))
	for i, item := range y.Content {
		items[i] = Resolve(item)
	}
	return items
}

// Str returns the scalar y as written, with ok true: any scalar is a
// string (value: 200 is "200", as envoyproxy/ratelimit reads it), and a
// null y is "". For any other y it reports a problem at path and returns
// "" and false. An alias y is not a scalar, unless it names a null: pass
// Str nodes as Fields and List return them, resolved. y must not be nil.
func (r *Reader) Str(y *yaml.Node, path string) (s string, ok bool) {
	if IsNull(y) {
		return "", true
	}
	if y.Kind != yaml.ScalarNode {
		r.Errorf(y, path, "want a string; got %s", Describe(y))
		return "", false
	}
	return y.Value, true
}

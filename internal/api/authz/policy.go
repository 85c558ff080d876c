package authz

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ratelimitd/ratelimitd/internal/policy/config"
	"github.com/ratelimitd/ratelimitd/internal/policy/yamlnode"
)

// Access is a set of verbs: what a grant allows in a domain, or what a
// call needs there. A call needs Charge when any of its descriptors
// charges, Refund when any asks a refund, and Check when it does neither.
type Access uint8

const (
	// Check asks about buckets without changing them: every descriptor a
	// check (ratelimit.v1 OPERATION_CHECK, Envoy's hits_addend 0) or of
	// cost 0. The policy file also calls it peek, its former name.
	Check Access = 1 << iota
	// Charge takes units from buckets: a descriptor of cost above 0 that
	// is neither a check nor a refund (a charge, an overdraft charge, an
	// admission). A grant of Charge allows Check too.
	Charge
	// Refund gives units back (ratelimit.v1 OPERATION_REFUND, Envoy's
	// is_negative_hits), whatever the cost. A grant of Refund allows Check
	// too; a grant of Charge does not allow Refund: a caller that may
	// charge and refund may charge without end.
	Refund
)

// verbs are the policy file's names of the verbs, in the order String
// lists them.
var verbs = []struct {
	name string
	a    Access
}{{"check", Check}, {"charge", Charge}, {"refund", Refund}}

// verbNamed returns the verb a policy file names s (peek is check's former
// name), or 0.
func verbNamed(s string) Access {
	if s == "peek" {
		return Check
	}
	for _, v := range verbs {
		if v.name == s {
			return v.a
		}
	}
	return 0
}

// String returns the verbs of a: "check", "charge", "refund", or several
// joined by "+" ("charge+refund"); "none" for the empty set.
func (a Access) String() string {
	var names []string
	for _, v := range verbs {
		if a&v.a != 0 {
			names = append(names, v.name)
			a &^= v.a
		}
	}
	if a != 0 {
		names = append(names, "Access("+strconv.Itoa(int(a))+")")
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "+")
}

// granted returns what a grant of a allows: a, and Check with Charge or
// Refund.
func granted(a Access) Access {
	if a&(Charge|Refund) != 0 {
		a |= Check
	}
	return a
}

// Bounds on what a policy may make the daemon read and hold.
const (
	// MaxFileBytes is the largest policy file or token file read; a larger
	// one is rejected before it is read.
	MaxFileBytes = 1 << 20
	// MaxTokens is the most tokens one policy's token files hold together.
	MaxTokens = 100_000
	// maxItems bounds the list items a policy may have, aliases (*name)
	// counted as often as they are used, so that a small file cannot make
	// the parser walk an exponential tree.
	maxItems    = 1 << 16
	maxProblems = 100
)

// Policy is a loaded authorization policy. It is immutable and safe for
// concurrent use.
type Policy struct {
	source    string
	clients   []*client
	anonymous *client // nil: callers without identity are Unauthenticated
	byCN      map[string][]*client
	byDNS     map[string][]*client
	byURI     map[string][]*client
	byToken   map[digest][]*client
	files     []string // the policy file, then each token file once
	sum       [32]byte // of every byte read, to tell a reload that changes nothing
}

// client is one client of the policy, and its grants merged per domain.
type client struct {
	name    string
	all     Access            // granted in every domain ("*"); 0 for none
	domains map[string]Access // granted per domain, besides all
}

// access returns the verbs c may use in domain (0 for none).
func (c *client) access(domain string) Access {
	return c.all | c.domains[domain]
}

// Source returns the policy file's path as Load was given it.
func (p *Policy) Source() string { return p.source }

// Files returns the files the policy was read from: the policy file, then
// every token file it names. They are what a watcher watches.
func (p *Policy) Files() []string { return slices.Clone(p.files) }

// Clients returns how many clients the policy names (anonymous not
// counted).
func (p *Policy) Clients() int { return len(p.clients) }

// Identifies reports whether any client is matched by a certificate rule
// (common_name, dns, uri), and whether any by a token.
func (p *Policy) Identifies() (byCertificate, byToken bool) {
	return len(p.byCN)+len(p.byDNS)+len(p.byURI) > 0, len(p.byToken) > 0
}

// Load reads the policy file at path and the token files it names. It
// returns the policy, or every problem found: config.Errors for problems in
// the files (each "file:line: field: problem"), or another error when the
// policy file cannot be read at all.
func Load(path string) (*Policy, error) {
	p, _, err := load(path)
	return p, err
}

// load is Load, also returning the files it read or tried to read, the
// policy file first (so that a policy rejected for a missing token file is
// watched for that file's arrival too).
func load(path string) (*Policy, []string, error) {
	files := []string{path}
	data, err := readFile(path)
	if err != nil {
		return nil, files, fmt.Errorf("%s: %w", path, err)
	}
	ps := newParser(path)
	h := sha256.New()
	part(h, path, data)
	ps.document(data)
	// Token files, each read once however many clients name it, in the
	// order they are first named.
	for _, tf := range ps.tokenFiles {
		files = append(files, tf.path)
		ps.p.files = append(ps.p.files, tf.path)
		data, err := readFile(tf.path)
		if err != nil {
			ps.errorf(tf.line, tf.field, "token file %s: %v", tf.path, err)
			continue
		}
		part(h, tf.path, data)
		ps.readTokens(tf.path, data, ps.tokens[tf.path])
	}
	if len(ps.errs) > 0 {
		slices.SortStableFunc(ps.errs, func(a, b *config.FieldError) int {
			if a.File != b.File {
				return boolInt(b.File == path) - boolInt(a.File == path) // the policy file first
			}
			return a.Line - b.Line
		})
		if ps.dropped > 0 {
			ps.errs = append(ps.errs, &config.FieldError{File: path, Problem: fmt.Sprintf("%d more problems not listed", ps.dropped)})
		}
		return nil, files, ps.errs
	}
	ps.p.files = append([]string{path}, ps.p.files...)
	h.Sum(ps.p.sum[:0])
	return ps.p, files, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// part adds a file's name and bytes to h, length-prefixed.
func part(h io.Writer, name string, data []byte) {
	fmt.Fprintf(h, "%d:%s%d:", len(name), name, len(data))
	h.Write(data)
}

// readFile reads a file of at most MaxFileBytes, checking the size before
// reading (and while reading, should the file grow in between).
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, err
	}
	defer f.Close()
	if info, err := f.Stat(); err == nil && info.Size() > MaxFileBytes {
		return nil, fmt.Errorf("%d bytes, larger than the limit of %d", info.Size(), MaxFileBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("larger than the limit of %d bytes", MaxFileBytes)
	}
	return data, nil
}

// Fields of each mapping of a policy file.
var (
	fileFields      = []string{"clients", "anonymous"}
	clientFields    = []string{"name", "match", "grants"}
	matchFields     = []string{"common_name", "dns", "uri", "tokens"}
	grantFields     = []string{"domains", "access"}
	anonymousFields = []string{"grants"}
)

// anonymousName is the name denials give callers without identity.
const anonymousName = "anonymous"

// parser checks one policy file and builds its Policy.
type parser struct {
	file, dir  string
	p          *Policy
	errs       config.Errors
	dropped    int
	tokenFiles []tokenFile
	tokens     map[string][]*client // token file path -> the clients naming it
	nTokens    int
	nodes      yamlnode.Reader // reports through errorf; bounds list items to maxItems
}

// newParser returns a parser for the policy file at path.
func newParser(path string) *parser {
	ps := &parser{
		file:   path,
		dir:    filepath.Dir(path),
		tokens: map[string][]*client{},
		p: &Policy{
			source:  path,
			byCN:    map[string][]*client{},
			byDNS:   map[string][]*client{},
			byURI:   map[string][]*client{},
			byToken: map[digest][]*client{},
		},
	}
	ps.nodes = yamlnode.Reader{MaxItems: maxItems, Errorf: func(n *yaml.Node, field, format string, args ...any) {
		ps.errorf(n.Line, field, format, args...)
	}}
	return ps
}

// tokenFile is a token file named by the policy, and where it is first
// named.
type tokenFile struct {
	path, field string
	line        int
}

func (ps *parser) errorf(line int, field, format string, args ...any) {
	ps.errorAt(ps.file, line, field, fmt.Sprintf(format, args...))
}

func (ps *parser) errorAt(file string, line int, field, problem string) {
	if len(ps.errs) >= maxProblems {
		ps.dropped++
		return
	}
	ps.errs = append(ps.errs, &config.FieldError{File: file, Line: line, Field: field, Problem: problem})
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// document checks the file's one YAML document and fills ps.p.
func (ps *parser) document(data []byte) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && err != io.EOF {
		msg, line := err.Error(), 0
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = msg[len(m[0]):]
		}
		ps.errorf(line, "", "invalid YAML: %s", strings.TrimPrefix(msg, "yaml: "))
		return
	}
	var next yaml.Node
	if err := dec.Decode(&next); err != io.EOF {
		ps.errorf(next.Line, "", "a second YAML document (an authorization policy is one)")
	}
	var root *yaml.Node
	if len(doc.Content) > 0 {
		root = yamlnode.Resolve(doc.Content[0])
	}
	if root == nil || yamlnode.IsNull(root) {
		ps.errorf(0, "", "empty: an authorization policy has clients, anonymous grants or both")
		return
	}
	m := ps.nodes.Fields(root, "", fileFields)
	if m == nil {
		return
	}
	names := map[string]int{}
	for i, y := range ps.nodes.List(m["clients"], "clients") {
		ps.client(y, fmt.Sprintf("clients[%d]", i), names)
	}
	if a := m["anonymous"]; a != nil && !yamlnode.IsNull(a) {
		if am := ps.nodes.Fields(a, "anonymous", anonymousFields); am != nil {
			c := &client{name: anonymousName, domains: map[string]Access{}}
			ps.grants(am["grants"], a.Line, "anonymous.grants", c)
			ps.p.anonymous = c
		}
	}
	if len(ps.p.clients) == 0 && ps.p.anonymous == nil && len(ps.errs) == 0 {
		ps.errorf(root.Line, "clients", "none, and no anonymous grants: every call would be refused")
	}
}

// client checks one client and adds it to the policy.
func (ps *parser) client(y *yaml.Node, path string, names map[string]int) {
	m := ps.nodes.Fields(y, path, clientFields)
	if m == nil {
		return
	}
	c := &client{domains: map[string]Access{}}
	switch n := m["name"]; {
	case n == nil || yamlnode.IsNull(n):
		ps.errorf(y.Line, path+".name", "missing: every client has a name")
	default:
		name, ok := ps.nodes.Str(n, path+".name")
		switch {
		case !ok:
		case name == "":
			ps.errorf(n.Line, path+".name", "empty: every client has a name")
		case name == anonymousName:
			ps.errorf(n.Line, path+".name", "%q is reserved for the anonymous grants", anonymousName)
		case names[name] > 0:
			ps.errorf(n.Line, path+".name", "client %q is already named at line %d", name, names[name])
		default:
			names[name] = n.Line
			c.name = name
		}
	}
	matches := ps.nodes.List(m["match"], path+".match")
	if len(matches) == 0 && (m["match"] == nil || yamlnode.IsNull(m["match"]) || yamlnode.Resolve(m["match"]).Kind == yaml.SequenceNode) {
		ps.errorf(y.Line, path+".match", "missing: a client needs at least one match rule")
	}
	for i, r := range matches {
		ps.match(r, fmt.Sprintf("%s.match[%d]", path, i), c)
	}
	ps.grants(m["grants"], y.Line, path+".grants", c)
	ps.p.clients = append(ps.p.clients, c)
}

// match checks one match rule of c and indexes c by it.
func (ps *parser) match(y *yaml.Node, path string, c *client) {
	m := ps.nodes.Fields(y, path, matchFields)
	if m == nil {
		return
	}
	if len(m) == 0 && len(yamlnode.Resolve(y).Content) > 0 {
		return // its keys are reported unknown
	}
	if len(m) != 1 {
		ps.errorf(y.Line, path, "want exactly one of %s; got %d", strings.Join(matchFields, ", "), len(m))
		return
	}
	for key, v := range m {
		field := path + "." + key
		s, ok := ps.nodes.Str(v, field)
		if !ok {
			return
		}
		if s == "" {
			ps.errorf(v.Line, field, "empty")
			return
		}
		switch key {
		case "common_name":
			ps.p.byCN[s] = append(ps.p.byCN[s], c)
		case "dns":
			s = strings.ToLower(s)
			ps.p.byDNS[s] = append(ps.p.byDNS[s], c)
		case "uri":
			u, err := url.Parse(s)
			if err != nil || u.Scheme == "" {
				ps.errorf(v.Line, field, "%q is not an absolute URI (want, say, spiffe://example.org/ns/shop/sa/api)", s)
				return
			}
			s = u.String() // as a certificate's URI will be written
			ps.p.byURI[s] = append(ps.p.byURI[s], c)
		case "tokens":
			tf := s
			if !filepath.IsAbs(tf) {
				tf = filepath.Join(ps.dir, tf)
			}
			if _, seen := ps.tokens[tf]; !seen {
				ps.tokenFiles = append(ps.tokenFiles, tokenFile{path: tf, field: field, line: v.Line})
			}
			ps.tokens[tf] = append(ps.tokens[tf], c)
		}
	}
}

// grants checks a list of grants and merges them into c.
func (ps *parser) grants(y *yaml.Node, line int, path string, c *client) {
	items := ps.nodes.List(y, path)
	if len(items) == 0 && (y == nil || yamlnode.IsNull(y) || yamlnode.Resolve(y).Kind == yaml.SequenceNode) {
		ps.errorf(line, path, "missing: at least one grant {domains: [...], access: check|charge|refund}")
	}
	for i, g := range items {
		gp := fmt.Sprintf("%s[%d]", path, i)
		m := ps.nodes.Fields(g, gp, grantFields)
		if m == nil {
			continue
		}
		access := ps.access(m["access"], g.Line, gp+".access")
		domains := ps.nodes.List(m["domains"], gp+".domains")
		if len(domains) == 0 && (m["domains"] == nil || yamlnode.IsNull(m["domains"]) || yamlnode.Resolve(m["domains"]).Kind == yaml.SequenceNode) {
			ps.errorf(g.Line, gp+".domains", "missing: at least one domain, or \"*\" for every domain")
		}
		for j, d := range domains {
			dp := fmt.Sprintf("%s.domains[%d]", gp, j)
			name, ok := ps.nodes.Str(d, dp)
			switch {
			case !ok || access == 0:
			case name == "":
				ps.errorf(d.Line, dp, "empty domain name")
			case name == "*":
				c.all |= access
			default:
				c.domains[name] |= access
			}
		}
	}
}

// access checks a grant's access — one verb, or a list of them — and
// returns what it allows (granted); 0 after a problem.
func (ps *parser) access(y *yaml.Node, line int, path string) Access {
	const want = "want check (or peek), charge or refund, or a list of them"
	if y == nil || yamlnode.IsNull(y) {
		ps.errorf(line, path, "missing: %s", want)
		return 0
	}
	items := []*yaml.Node{yamlnode.Resolve(y)}
	seq := items[0].Kind == yaml.SequenceNode
	if seq {
		if items = ps.nodes.List(y, path); len(items) == 0 {
			ps.errorf(y.Line, path, "empty: %s", want)
			return 0
		}
	}
	var a Access
	for i, v := range items {
		vp := path
		if seq {
			vp = fmt.Sprintf("%s[%d]", path, i)
		}
		s, ok := ps.nodes.Str(v, vp)
		if !ok {
			return 0
		}
		verb := verbNamed(s)
		if verb == 0 {
			ps.errorf(v.Line, vp, "%q: %s", s, want)
			return 0
		}
		a |= verb
	}
	return granted(a)
}

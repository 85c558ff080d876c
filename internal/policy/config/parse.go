package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimitd/ratelimitd/internal/core/algorithms"
	"github.com/ratelimitd/ratelimitd/internal/policy/yamlnode"
)

// PolicyBounds bound what loading a policy may cost, so that an oversize file
// is rejected before it is read into memory, and one whose aliases expand
// enormously is stopped early.
type PolicyBounds struct {
	// MaxBytes is the most bytes of one policy file, and of all the files
	// of a directory together. A file beyond it is rejected from its size
	// (os.Stat) without being read; reading stops one byte past it in any
	// case, for a file that grows or is not a regular file.
	MaxBytes int64
	// MaxDescriptors is the most descriptors of a policy (all files of a
	// directory together), counting each use of a YAML alias: building
	// stops at the first one beyond it.
	MaxDescriptors int
}

// DefaultPolicyBounds are generous for hand-written policies (envoyproxy/ratelimit
// policy files are usually kilobytes) and keep loading a policy within
// about 100 MB of memory: the YAML decoder holds ~50 bytes a byte of file
// while it runs, a loaded descriptor ~600 bytes.
var DefaultPolicyBounds = PolicyBounds{MaxBytes: 2 << 20, MaxDescriptors: 100_000}

// Check reports a limit that is not positive: such a limit would reject
// every policy.
func (l PolicyBounds) Check() error {
	switch {
	case l.MaxBytes <= 0:
		return fmt.Errorf("max policy bytes is %d: want at least 1", l.MaxBytes)
	case l.MaxDescriptors <= 0:
		return fmt.Errorf("max policy descriptors is %d: want at least 1", l.MaxDescriptors)
	}
	return nil
}

// Load reads the policy at path within DefaultPolicyBounds; see LoadWithin.
func Load(path string) (*Policy, error) { return LoadWithin(path, DefaultPolicyBounds) }

// LoadWithin reads the policy at path: one YAML file (whatever its name),
// or a directory whose *.yaml and *.yml files each hold one domain. In a
// directory, files are read in name order; names starting with "." and
// subdirectories are skipped; symbolic links are followed. A directory
// without a policy file is an error.
//
// It checks every file completely and returns the policy, or every problem
// it finds as Errors. A domain defined in two files is a problem of the
// second file. Beyond the limits l (see PolicyBounds): a file larger than
// l.MaxBytes is a problem of that file, and a directory whose files are
// larger together is a problem of the directory, found before any file is
// read; more than l.MaxDescriptors descriptors is a problem where the first
// one too many is. A path that cannot be read, or a directory without
// policy files, is reported as a single error of another type.
func LoadWithin(path string, l PolicyBounds) (*Policy, error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	files := []string{path}
	if info.IsDir() {
		if files, err = policyFiles(path); err != nil {
			return nil, err
		}
	}
	if errs := checkSizes(path, files, l.MaxBytes); len(errs) > 0 {
		return nil, errs
	}
	var (
		domains domainList
		errs    Errors
	)
	budget := l
	for _, file := range files {
		data, err := readLimited(file, budget.MaxBytes)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			errs = append(errs, &FieldError{File: file, Problem: err.Error()})
			continue
		}
		if int64(len(data)) > budget.MaxBytes {
			errs = append(errs, tooLarge(file, int64(len(data)), l.MaxBytes))
			break
		}
		budget.MaxBytes -= int64(len(data))
		d, used, ferrs := parseDomain(file, data, budget.MaxDescriptors, l.MaxDescriptors)
		budget.MaxDescriptors -= used
		errs = append(errs, ferrs...)
		if d == nil {
			continue
		}
		if err := domains.add(d, file, d.line); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return newPolicy(domains.list), nil
}

// checkSizes returns the problems of files (the policy at path) larger
// than maxBytes, or else of their being larger together, before any is
// read. A file it cannot stat is left to the reading, to report.
func checkSizes(path string, files []string, maxBytes int64) Errors {
	var (
		errs  Errors
		total int64
	)
	for _, file := range files {
		if info, err := os.Stat(file); err == nil {
			if info.Size() > maxBytes {
				errs = append(errs, tooLarge(file, info.Size(), maxBytes))
			}
			total += info.Size()
		}
	}
	if len(errs) == 0 && total > maxBytes {
		errs = append(errs, &FieldError{File: path,
			Problem: fmt.Sprintf("the policy files are %d bytes together, more than the limit of %d (--max-policy-bytes)", total, maxBytes)})
	}
	return errs
}

// domainList collects a policy's domains in order, refusing a name defined
// twice.
type domainList struct {
	byName map[string]*Domain
	list   []*Domain
}

// add adds d, read from file at line, or returns the problem of a domain
// of d's name already added.
func (l *domainList) add(d *Domain, file string, line int) *FieldError {
	if first, dup := l.byName[d.Name]; dup {
		return &FieldError{File: file, Line: line, Field: "domain",
			Problem: fmt.Sprintf("domain %q is already defined in %s", d.Name, first.Source)}
	}
	if l.byName == nil {
		l.byName = make(map[string]*Domain)
	}
	l.byName[d.Name] = d
	l.list = append(l.list, d)
	return nil
}

// readLimited reads file up to one byte past max.
func readLimited(file string, max int64) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, max+1))
}

// tooLarge reports a file of size bytes (or, when read, at least size)
// beyond the limit of max.
func tooLarge(file string, size, max int64) *FieldError {
	return &FieldError{File: file, Problem: fmt.Sprintf("%d bytes, more than the limit of %d (--max-policy-bytes); not parsed", size, max)}
}

// policyFiles returns the paths of dir's policy files in name order; none
// is an error, which points at a directory below that has some (where
// envoyproxy/ratelimit keeps them).
func policyFiles(dir string) ([]string, error) {
	files, err := listPolicyFiles(dir)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		if below := policyDirBelow(dir, 2); below != "" {
			return nil, fmt.Errorf("%s: no policy files (*.yaml, *.yml), but %s has some: envoyproxy/ratelimit keeps them one level down, in RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config; give that directory", dir, below)
		}
		return nil, fmt.Errorf("%s: no policy files (*.yaml, *.yml)", dir)
	}
	return files, nil
}

// listPolicyFiles returns the paths of dir's policy files in name order.
func listPolicyFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		name := e.Name()
		ext := filepath.Ext(name)
		if strings.HasPrefix(name, ".") || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		file := filepath.Join(dir, name)
		if info, err := os.Stat(file); err == nil && info.IsDir() {
			continue // a directory named like a file; a broken link is read and reported
		}
		files = append(files, file)
	}
	return files, nil
}

// policyDirBelow returns the first directory (in name order, depth first)
// at most depth levels below dir that holds a policy file, or "".
func policyDirBelow(dir string, depth int) string {
	if depth == 0 {
		return ""
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		sub := filepath.Join(dir, e.Name())
		if files, _ := listPolicyFiles(sub); len(files) > 0 {
			return sub
		}
		if found := policyDirBelow(sub, depth-1); found != "" {
			return found
		}
	}
	return ""
}

// Parse returns the policy in data, one policy file's contents, or every
// problem in it (see Errors), within DefaultPolicyBounds. source names the file in
// errors and becomes the domain's Source.
func Parse(source string, data []byte) (*Policy, error) {
	if int64(len(data)) > DefaultPolicyBounds.MaxBytes {
		return nil, Errors{tooLarge(source, int64(len(data)), DefaultPolicyBounds.MaxBytes)}
	}
	d, _, errs := parseDomain(source, data, DefaultPolicyBounds.MaxDescriptors, DefaultPolicyBounds.MaxDescriptors)
	if len(errs) > 0 {
		return nil, errs
	}
	return newPolicy([]*Domain{d}), nil
}

// newPolicy returns the policy of these domains, whose names differ.
func newPolicy(domains []*Domain) *Policy {
	p := &Policy{domains: make(map[string]*Domain, len(domains)), sorted: domains}
	for _, d := range domains {
		p.domains[d.Name] = d
	}
	slices.SortFunc(p.sorted, func(a, b *Domain) int { return strings.Compare(a.Name, b.Name) })
	return p
}

// Fields of each mapping of a policy file.
var (
	fileFields       = []string{"domain", "descriptors", "quota_fallback"}
	descriptorFields = []string{"key", "value", "rate_limit", "rate_limits", "shadow_mode", "detailed_metric", "descriptors",
		"quota_mode", "share_threshold", "value_to_metric", "metadata", "refunds"}
	limitFields = []string{"unit", "requests_per_unit", "name", "unlimited", "replaces",
		"algorithm", "burst", "unit_multiplier", "retry_jitter", "overdraft", "max_in_flight", "lease"}
	replacesFields = []string{"name"}
)

// parser checks one policy file and builds its domain.
type parser struct {
	file  string
	errs  Errors
	nodes yamlnode.Reader // reports through errorf

	names    map[string]bool // every limit name of the domain
	replaces []replacesRef   // every replaces entry, checked against names at the end

	descriptorCount int // so far, to stop at maxDescriptors
	maxDescriptors  int // what is left of PolicyBounds.MaxDescriptors
	descriptorLimit int // PolicyBounds.MaxDescriptors, for the report
	tooMany         bool
	dropped         int // problems beyond maxProblems
}

// maxProblems bounds the problems listed for one file, so that a report
// stays readable.
const maxProblems = 1000

// replacesRef is a name in a replaces list, and where it is.
type replacesRef struct {
	name, field string
	line        int
}

// parseDomain returns the domain in data, how many descriptors it built
// (at most budget), and every problem in it, sorted by line. The domain is
// nil when there are problems. budget is what is left of the policy's limit
// of descriptors, limit.
func parseDomain(file string, data []byte, budget, limit int) (*Domain, int, Errors) {
	p := newParser(file, budget, limit)
	return p.finish(p.document(data))
}

// parseDomainNode is parseDomain of a document given as YAML nodes, root
// its top node, as FromRateLimitConfigs builds them: the same checks,
// without encoding the nodes as YAML text and decoding them again.
func parseDomainNode(file string, root *yaml.Node, budget, limit int) (*Domain, int, Errors) {
	p := newParser(file, budget, limit)
	return p.finish(p.domain(root))
}

func newParser(file string, budget, limit int) *parser {
	p := &parser{file: file, names: map[string]bool{}, maxDescriptors: budget, descriptorLimit: limit}
	p.nodes.Errorf = p.errorf
	return p
}

// finish checks what needs the whole document (the names replaces
// entries give) and returns the domain d, how many descriptors were
// built, and every problem, sorted by line; the domain is nil when there
// are problems.
func (p *parser) finish(d *Domain) (*Domain, int, Errors) {
	for _, r := range p.replaces {
		if !p.names[r.name] {
			p.errorf(&yaml.Node{Line: r.line}, r.field, "no limit of this domain is named %q", r.name)
		}
	}
	if len(p.errs) > 0 {
		slices.SortStableFunc(p.errs, func(a, b *FieldError) int { return a.Line - b.Line })
		if p.dropped > 0 {
			more := fmt.Sprintf("%d more problems not listed", p.dropped)
			if p.dropped == 1 {
				more = "1 more problem not listed"
			}
			p.errs = append(p.errs, &FieldError{File: p.file, Problem: more})
		}
		return nil, p.descriptorCount, p.errs
	}
	return d, p.descriptorCount, nil
}

// problems returns how many problems have been found so far, listed or not.
func (p *parser) problems() int { return len(p.errs) + p.dropped }

// errorf reports a problem with the field at path, whose YAML is n (or, for
// a missing field, the mapping that lacks it).
func (p *parser) errorf(n *yaml.Node, path, format string, args ...any) {
	if len(p.errs) >= maxProblems {
		p.dropped++
		return
	}
	line := 0
	if n != nil {
		line = n.Line
	}
	p.errs = append(p.errs, &FieldError{File: p.file, Line: line, Field: path, Problem: fmt.Sprintf(format, args...)})
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): `)

// syntaxError reports an error of the YAML parser.
func (p *parser) syntaxError(err error) {
	msg := err.Error()
	line := 0
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	p.errs = append(p.errs, &FieldError{File: p.file, Line: line, Problem: "invalid YAML: " + msg})
}

// document checks the file's single YAML document and returns its domain.
func (p *parser) document(data []byte) *Domain {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && err != io.EOF {
		p.syntaxError(err)
		return nil
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == io.EOF:
	case err != nil:
		p.syntaxError(err)
		return nil
	case len(next.Content) > 0 && !yamlnode.IsNull(next.Content[0]):
		p.errorf(next.Content[0], "", "a second YAML document (a policy file holds one domain)")
	}
	var root *yaml.Node
	if len(doc.Content) > 0 {
		root = yamlnode.Resolve(doc.Content[0])
	}
	return p.domain(root)
}

// domain checks a document's top node, root (nil for an empty document),
// and returns its domain.
func (p *parser) domain(root *yaml.Node) *Domain {
	if root == nil || yamlnode.IsNull(root) {
		p.errorf(root, "domain", "missing: a policy file names its domain")
		return nil
	}
	m := p.nodes.Fields(root, "", fileFields)
	if m == nil {
		return nil
	}
	d := &Domain{Source: p.file, line: root.Line}
	switch v := m["domain"]; {
	case v == nil || yamlnode.IsNull(v):
		p.errorf(root, "domain", "missing: a policy file names its domain")
	default:
		d.line = v.Line
		if name, ok := p.nodes.Str(v, "domain"); ok && name == "" {
			p.errorf(v, "domain", "empty: a policy file names its domain")
		} else {
			d.Name = name
		}
	}
	if v := m["quota_fallback"]; v != nil {
		if f, ok := p.nodes.Str(v, "quota_fallback"); ok {
			if d.QuotaFallback, ok = parseQuotaFallback(f); !ok {
				p.errorf(v, "quota_fallback", "%q: want allow, deny or ask", f)
			}
		}
	}
	p.descriptors(m["descriptors"], "descriptors", &d.root, level{statKey: d.Name})
	return d
}

// level is what a descriptor inherits from the descriptors above it.
type level struct {
	// statKey is the parent's Rule.StatKey.
	statKey string
	// shared holds, per level above, the wildcard value of a
	// share_threshold descriptor, or "" (Rule.Shared); nil when there is
	// none above.
	shared []string
	depth  int
}

// descriptors checks a list of descriptors and adds them to parent.
func (p *parser) descriptors(seq *yaml.Node, path string, parent *node, up level) {
	items := p.nodes.List(seq, path)
	where := map[Entry]string{} // where each key and value is at this level
	for i, item := range items {
		p.descriptor(item, fmt.Sprintf("%s[%d]", path, i), parent, up, where)
	}
}

// descriptor checks one descriptor and adds it to parent: its depth and
// count against the policy's bounds, then its entry, its rule and the
// descriptors below.
func (p *parser) descriptor(y *yaml.Node, path string, parent *node, up level, where map[Entry]string) {
	if up.depth == MaxDepth {
		p.errorf(y, path, "nested more than %d deep (the most a policy nests)", MaxDepth)
		return
	}
	if !p.count(y, path) {
		return
	}
	m := p.nodes.Fields(y, path, descriptorFields)
	if m == nil {
		return
	}
	e, entryOK := p.entry(y, m, path, where)
	n := &node{}
	here := p.rule(m, path, e, up, n)
	p.descriptors(m["descriptors"], yamlnode.Join(path, "descriptors"), n, here)
	if entryOK {
		parent.add(e, n)
	}
}

// count counts the descriptor at y against the policy's bound and reports
// whether it is within it; the first one beyond is reported, even beyond
// maxProblems.
func (p *parser) count(y *yaml.Node, path string) bool {
	if p.descriptorCount >= p.maxDescriptors {
		if !p.tooMany {
			p.tooMany = true
			p.errs = append(p.errs, &FieldError{File: p.file, Line: y.Line, Field: path,
				Problem: fmt.Sprintf("more than %d descriptors (--max-policy-descriptors; aliases expanded, the files of a directory together); stopped here", p.descriptorLimit)})
		}
		return false
	}
	p.descriptorCount++
	return true
}

// entry checks a descriptor's key and value, and that no earlier
// descriptor of its level (where) has the same; ok is false when the
// descriptor cannot be added to its level.
func (p *parser) entry(y *yaml.Node, m map[string]*yaml.Node, path string, where map[Entry]string) (e Entry, ok bool) {
	keyOK := false
	if v := m["key"]; v == nil || yamlnode.IsNull(v) {
		p.errorf(y, yamlnode.Join(path, "key"), "missing: every descriptor has a key")
	} else if e.Key, keyOK = p.nodes.Str(v, yamlnode.Join(path, "key")); keyOK && e.Key == "" {
		p.errorf(v, yamlnode.Join(path, "key"), "empty: every descriptor has a key")
		keyOK = false
	}
	valueOK := true
	if v := m["value"]; v != nil {
		e.Value, valueOK = p.nodes.Str(v, yamlnode.Join(path, "value"))
	}
	if !keyOK || !valueOK {
		return e, false
	}
	if first, dup := where[e]; dup {
		what := fmt.Sprintf("key %q without a value", e.Key)
		if e.Value != "" {
			what = fmt.Sprintf("key %q and value %q", e.Key, e.Value)
		}
		p.errorf(y, path, "a second descriptor with %s at this level (the first is %s)", what, first)
		return e, false
	}
	where[e] = path
	return e, true
}

// rule checks the descriptor's own fields (its limits and the flags that
// qualify them), sets n's rule and sharing, and returns what the
// descriptors below it inherit.
func (p *parser) rule(m map[string]*yaml.Node, path string, e Entry, up level, n *node) level {
	here := level{statKey: up.statKey + "." + e.Key, shared: up.shared, depth: up.depth + 1}
	if e.Value != "" {
		here.statKey += "_" + e.Value
	}
	// The fields below are rare: their paths are built only when present,
	// as a file with aliases may hold hundreds of thousands of descriptors.
	if v := m["share_threshold"]; v != nil && p.shareThreshold(v, yamlnode.Join(path, "share_threshold"), e.Value) {
		n.shared = true
		here.shared = make([]string, here.depth)
		copy(here.shared, up.shared)
		here.shared[up.depth] = e.Value
	}
	limits := p.limits(m, path)
	shadow := p.boolean(m["shadow_mode"], yamlnode.Join(path, "shadow_mode"))
	quota := false
	if v := m["quota_mode"]; v != nil {
		quota = p.boolean(v, yamlnode.Join(path, "quota_mode"))
	}
	detailed := p.boolean(m["detailed_metric"], yamlnode.Join(path, "detailed_metric"))
	if v := m["value_to_metric"]; v != nil {
		p.boolean(v, yamlnode.Join(path, "value_to_metric")) // metrics only: see doc.go
	}
	var metadata *structpb.Struct
	if v := m["metadata"]; v != nil {
		metadata = p.metadata(v, yamlnode.Join(path, "metadata"))
	}
	noRefunds := false
	if v := m["refunds"]; v != nil && !yamlnode.IsNull(v) {
		problems := len(p.errs) + p.dropped
		noRefunds = !p.boolean(v, yamlnode.Join(path, "refunds")) && len(p.errs)+p.dropped == problems
		if noRefunds && len(limits) == 0 {
			p.errorf(v, yamlnode.Join(path, "refunds"), "false refuses refunds of this descriptor's own limits, and it has none: set it beside the rate_limit it protects (descriptors nested below do not inherit it)")
		}
	}
	if len(limits) > 0 {
		nameBuckets(limits)
		n.rule = &Rule{StatKey: here.statKey, Limits: limits, ShadowMode: shadow, QuotaMode: quota, DetailedMetric: detailed, Metadata: metadata, NoRefunds: noRefunds}
		if here.shared != nil {
			n.rule.Shared = make([]string, here.depth)
			copy(n.rule.Shared, here.shared)
		}
	}
	return here
}

// add makes c the child of n selected by e.
func (n *node) add(e Entry, c *node) {
	switch {
	case e.Value == "":
		if n.keyOnly == nil {
			n.keyOnly = map[string]*node{}
		}
		n.keyOnly[e.Key] = c
	case strings.Contains(e.Value, "*"):
		n.wildcard = append(n.wildcard, newWildcard(e.Key, e.Value, c))
	default:
		if n.exact == nil {
			n.exact = map[Entry]*node{}
		}
		n.exact[e] = c
	}
}

// shareThreshold returns the descriptor's share_threshold, which only a
// wildcard value (one holding a *) may set.
func (p *parser) shareThreshold(v *yaml.Node, path, value string) bool {
	on := p.boolean(v, path)
	if on && !strings.Contains(value, "*") {
		p.errorf(v, path, "applies to a wildcard value (one holding a *); value %q is not one", value)
		return false
	}
	return on
}

// metadata returns a descriptor's metadata (Rule.Metadata): a mapping of
// anything JSON holds — strings as keys; mappings, lists, strings,
// numbers, booleans and nulls as values — nil for none or an empty one.
func (p *parser) metadata(v *yaml.Node, path string) *structpb.Struct {
	if v == nil || yamlnode.IsNull(v) {
		return nil
	}
	if r := yamlnode.Resolve(v); r.Kind != yaml.MappingNode {
		p.errorf(v, path, "want a mapping; got %s", yamlnode.Describe(v))
		return nil
	}
	var m map[string]any
	if err := v.Decode(&m); err != nil {
		p.errorf(v, path, "%v", err)
		return nil
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		p.errorf(v, path, "not a JSON object: %v", err)
		return nil
	}
	if len(s.GetFields()) == 0 {
		return nil
	}
	return s
}

// limits checks a descriptor's rate_limit or rate_limits and returns its
// limits: none when it has neither, or when they have problems.
func (p *parser) limits(m map[string]*yaml.Node, path string) []*Limit {
	one, many := m["rate_limit"], m["rate_limits"]
	switch {
	case one != nil && many != nil:
		p.errorf(many, yamlnode.Join(path, "rate_limits"), "a descriptor has rate_limit or rate_limits, not both")
		return nil
	case one != nil:
		if yamlnode.IsNull(one) {
			p.errorf(one, yamlnode.Join(path, "rate_limit"), "empty: give unit and requests_per_unit, or unlimited: true")
			return nil
		}
		if l := p.limit(one, yamlnode.Join(path, "rate_limit")); l != nil {
			return []*Limit{l}
		}
		return nil
	case many != nil:
		if r := yamlnode.Resolve(many); yamlnode.IsNull(r) || r.Kind == yaml.SequenceNode && len(r.Content) == 0 {
			p.errorf(many, yamlnode.Join(path, "rate_limits"), "empty: list at least one limit")
			return nil
		}
		items := p.nodes.List(many, yamlnode.Join(path, "rate_limits"))
		if len(items) == 0 {
			return nil // not a list
		}
		limits := make([]*Limit, 0, len(items))
		ok := true
		for i, item := range items {
			ipath := fmt.Sprintf("%s[%d]", yamlnode.Join(path, "rate_limits"), i)
			l := p.limit(item, ipath)
			if l == nil {
				ok = false
				continue
			}
			if l.Unlimited && len(items) > 1 {
				p.errorf(item, yamlnode.Join(ipath, "unlimited"), "an unlimited limit is the only limit of its descriptor")
				ok = false
				continue
			}
			for j, other := range limits {
				if other.Key == l.Key {
					p.errorf(item, ipath, "the same limit as rate_limits[%d] (%s)", j, l.Key)
					ok = false
				}
			}
			limits = append(limits, l)
		}
		if !ok {
			return nil
		}
		return limits
	}
	return nil
}

// limit checks one rate_limit block and returns its limit, or nil when it
// has problems. It runs one step per concern, each reporting its own
// problems; the limit is built only when none of them found any.
func (p *parser) limit(y *yaml.Node, path string) *Limit {
	m := p.nodes.Fields(y, path, limitFields)
	if m == nil {
		return nil
	}
	nerrs := p.problems()
	l := &Limit{}
	l.Name = p.limitName(m["name"], yamlnode.Join(path, "name"))
	l.Unlimited = p.boolean(m["unlimited"], yamlnode.Join(path, "unlimited"))
	l.Replaces = p.replacesList(m["replaces"], yamlnode.Join(path, "replaces"), l.Name)
	if l.Unlimited {
		p.checkUnlimited(m, path)
		if p.problems() > nerrs {
			return nil
		}
		l.Key = unlimitedKey
		return l
	}

	a := arithmetic{alg: p.algorithm(m["algorithm"], yamlnode.Join(path, "algorithm"))}
	if a.alg == algorithms.Concurrency {
		return p.concurrencyLimit(l, m, y, path, nerrs)
	}
	for _, f := range []string{"max_in_flight", "lease"} {
		if v := m[f]; v != nil {
			p.errorf(v, yamlnode.Join(path, f), "only with algorithm: concurrency")
		}
	}
	l.Unit = p.unit(m["unit"], y, yamlnode.Join(path, "unit"))
	a.requests, l.DenyAll = p.requestsPerUnit(m["requests_per_unit"], y, yamlnode.Join(path, "requests_per_unit"))
	a.burst = p.burst(m["burst"], yamlnode.Join(path, "burst"), a.alg)
	l.UnitMultiplier = p.unitMultiplier(m["unit_multiplier"], yamlnode.Join(path, "unit_multiplier"))
	l.RetryJitter = p.retryJitter(m["retry_jitter"], yamlnode.Join(path, "retry_jitter"))
	l.Overdraft = p.overdraft(m["overdraft"], yamlnode.Join(path, "overdraft"))
	if l.DenyAll {
		p.checkDenyAll(m, y, path)
	}
	if p.problems() > nerrs {
		return nil
	}
	if l.DenyAll {
		l.Key = denyAllKey
		return l
	}
	var ok bool
	if a.period, ok = p.period(l, m["unit_multiplier"], path); !ok {
		return nil
	}
	if l.Rate, ok = p.rate(a, y, path); !ok {
		return nil
	}
	l.Key = limitKey("", &l.Rate)
	return l
}

// checkDenyAll reports burst or overdraft in a rate_limit block (m, at
// path) of requests_per_unit: 0, which admits nothing for them to apply
// to. An algorithm may be named (a policy's rules often all name one):
// with nothing to admit, it decides nothing.
func (p *parser) checkDenyAll(m map[string]*yaml.Node, block *yaml.Node, path string) {
	for _, f := range []string{"burst", "overdraft"} {
		if m[f] != nil {
			p.errorf(block, yamlnode.Join(path, "requests_per_unit"), "0 denies every request; burst and overdraft do not apply")
			return
		}
	}
}

// concurrencyLimit checks the rest of a rate_limit block of algorithm:
// concurrency — max_in_flight and lease, both required, in place of unit
// and requests_per_unit — and returns l with its arithmetic, or nil when
// the block has problems (beyond the nerrs found before).
func (p *parser) concurrencyLimit(l *Limit, m map[string]*yaml.Node, block *yaml.Node, path string, nerrs int) *Limit {
	for _, f := range []string{"unit", "requests_per_unit", "burst", "unit_multiplier"} {
		if v := m[f]; v != nil {
			p.errorf(v, yamlnode.Join(path, f), "not allowed with algorithm: concurrency (it takes max_in_flight and lease)")
		}
	}
	inFlight, lease := m["max_in_flight"], m["lease"]
	var n int64
	if inFlight == nil || yamlnode.IsNull(inFlight) {
		p.errorf(block, yamlnode.Join(path, "max_in_flight"), "missing: how many units may be in flight at once")
	} else {
		n, _ = p.integer(inFlight, yamlnode.Join(path, "max_in_flight"), 1, algorithms.MaxInFlight)
	}
	d := p.lease(lease, block, yamlnode.Join(path, "lease"))
	l.RetryJitter = p.retryJitter(m["retry_jitter"], yamlnode.Join(path, "retry_jitter"))
	l.Overdraft = p.overdraft(m["overdraft"], yamlnode.Join(path, "overdraft"))
	if p.problems() > nerrs {
		return nil
	}
	var ok bool
	if l.Rate, ok = p.rate(arithmetic{alg: algorithms.Concurrency, requests: n, period: d}, block, path); !ok {
		return nil
	}
	l.Key = limitKey("", &l.Rate)
	return l
}

// lease returns rate_limit.lease, which a concurrency requires: a Go
// duration, positive, at most algorithms.MaxLease.
func (p *parser) lease(v, block *yaml.Node, path string) time.Duration {
	if v == nil || yamlnode.IsNull(v) {
		p.errorf(block, path, "missing: how long a unit never released stays in flight (longer than the longest request)")
		return 0
	}
	s, ok := p.nodes.Str(v, path)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		p.errorf(v, path, "not a duration: %q (want a Go duration such as 90s or 10m)", s)
	case d <= 0:
		p.errorf(v, path, "must be positive: %q", s)
	case d > algorithms.MaxLease:
		p.errorf(v, path, "%q is longer than the longest lease, %v", s, algorithms.MaxLease)
	default:
		return d
	}
	return 0
}

// arithmetic is what a limit's algorithms.Limit is made of.
type arithmetic struct {
	alg      algorithms.Algorithm
	requests int64
	period   time.Duration
	burst    int64 // 0 for the default
}

// limitName returns rate_limit.name ("" when absent) and records it among
// the domain's names, for replaces.
func (p *parser) limitName(v *yaml.Node, path string) string {
	if v == nil {
		return ""
	}
	name, _ := p.nodes.Str(v, path)
	if name != "" {
		p.names[name] = true
	}
	return name
}

// replacesList checks a limit's replaces entries and returns the names
// they give; own is the limit's name, which it may not replace. Whether
// each name exists is checked once the whole file is read.
func (p *parser) replacesList(v *yaml.Node, path, own string) []string {
	var names []string
	for i, r := range p.nodes.List(v, path) {
		rpath := fmt.Sprintf("%s[%d]", path, i)
		rm := p.nodes.Fields(r, rpath, replacesFields)
		if rm == nil {
			continue
		}
		var name string
		if v := rm["name"]; v != nil {
			name, _ = p.nodes.Str(v, yamlnode.Join(rpath, "name"))
		}
		switch {
		case name == "":
			p.errorf(r, yamlnode.Join(rpath, "name"), "missing: a replaces entry names the limit it replaces")
		case name == own:
			p.errorf(rm["name"], yamlnode.Join(rpath, "name"), "a limit cannot replace itself")
		default:
			p.replaces = append(p.replaces, replacesRef{name: name, field: yamlnode.Join(rpath, "name"), line: rm["name"].Line})
			names = append(names, name)
		}
	}
	return names
}

// checkUnlimited reports the fields that an unlimited limit may not have.
func (p *parser) checkUnlimited(m map[string]*yaml.Node, path string) {
	for _, f := range []string{"unit", "requests_per_unit", "algorithm", "burst", "unit_multiplier", "retry_jitter", "overdraft", "max_in_flight", "lease"} {
		if v := m[f]; v != nil && !yamlnode.IsNull(v) {
			p.errorf(v, yamlnode.Join(path, f), "not allowed with unlimited: true (an unlimited limit keeps no bucket)")
		}
	}
}

// unit returns rate_limit.unit, which is required; block is the rate_limit
// mapping, where a missing unit is reported.
func (p *parser) unit(v, block *yaml.Node, path string) Unit {
	if v == nil || yamlnode.IsNull(v) {
		p.errorf(block, path, "missing (want %s)", unitNames)
		return UnitNone
	}
	s, ok := p.nodes.Str(v, path)
	if !ok {
		return UnitNone
	}
	u, ok := parseUnit(s)
	if !ok {
		p.errorf(v, path, "unknown unit %q (want %s)", s, unitNames)
	}
	return u
}

// requestsPerUnit returns rate_limit.requests_per_unit, which is required;
// denyAll is true for a literal 0, which denies every request.
func (p *parser) requestsPerUnit(v, block *yaml.Node, path string) (requests int64, denyAll bool) {
	switch {
	case v == nil || yamlnode.IsNull(v):
		p.errorf(block, path, "missing: how many requests each unit admits")
	case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!int" && v.Value == "0":
		return 0, true
	default:
		requests, _ = p.integer(v, path, 1, algorithms.MaxRequests)
	}
	return requests, false
}

// algorithm returns rate_limit.algorithm, fixed_window when absent.
func (p *parser) algorithm(v *yaml.Node, path string) algorithms.Algorithm {
	if v == nil || yamlnode.IsNull(v) {
		return algorithms.FixedWindow
	}
	s, ok := p.nodes.Str(v, path)
	if !ok {
		return algorithms.FixedWindow
	}
	a, err := algorithms.ParseAlgorithm(s)
	if err != nil {
		p.errorf(v, path, "%v", err)
		return algorithms.FixedWindow
	}
	return a
}

// burst returns rate_limit.burst, 0 when absent; the windows take none.
func (p *parser) burst(v *yaml.Node, path string, alg algorithms.Algorithm) int64 {
	burst, _ := p.integer(v, path, 1, algorithms.MaxRequests)
	if burst != 0 && (alg == algorithms.FixedWindow || alg == algorithms.SlidingWindow) {
		p.errorf(v, path, "not allowed with algorithm %v (a window admits requests_per_unit per period; burst is for token_bucket, leaky_bucket and leaky_bucket_queue)", alg)
	}
	return burst
}

// unitMultiplier returns rate_limit.unit_multiplier, 1 when absent.
func (p *parser) unitMultiplier(v *yaml.Node, path string) int64 {
	n, _ := p.integer(v, path, 1, math.MaxInt64)
	if n == 0 {
		return 1
	}
	return n
}

// retryJitter returns rate_limit.retry_jitter, 0 when absent.
func (p *parser) retryJitter(v *yaml.Node, path string) time.Duration {
	if v == nil || yamlnode.IsNull(v) {
		return 0
	}
	s, ok := p.nodes.Str(v, path)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		p.errorf(v, path, "not a duration: %q (want a Go duration such as 250ms or 1s)", s)
	case d < 0:
		p.errorf(v, path, "negative: %q", s)
	case d > algorithms.MaxSpan:
		p.errorf(v, path, "%q is longer than the longest period, %v", s, algorithms.MaxSpan)
	default:
		return d
	}
	return 0
}

// overdraft returns rate_limit.overdraft: OverdraftDefault when absent
// or null.
func (p *parser) overdraft(v *yaml.Node, path string) Overdraft {
	switch {
	case v == nil || yamlnode.IsNull(v):
		return OverdraftDefault
	case p.boolean(v, path):
		return OverdraftOn
	}
	return OverdraftOff
}

// period returns l's period, UnitMultiplier × Unit, and reports false,
// with the problem at the unit_multiplier field multiplier, when it is
// longer than algorithms.MaxSpan.
func (p *parser) period(l *Limit, multiplier *yaml.Node, path string) (time.Duration, bool) {
	unit := l.Unit.Duration()
	if l.UnitMultiplier > int64(algorithms.MaxSpan/unit) {
		p.errorf(multiplier, yamlnode.Join(path, "unit_multiplier"), "%d × %v is longer than the longest period, %v", l.UnitMultiplier, l.Unit, algorithms.MaxSpan)
		return 0, false
	}
	return time.Duration(l.UnitMultiplier) * unit, true
}

// rate returns the arithmetic a, or reports false, with the problem at
// the rate_limit block at path, when the algorithm refuses the numbers.
func (p *parser) rate(a arithmetic, block *yaml.Node, path string) (algorithms.Limit, bool) {
	r, err := algorithms.NewLimit(a.alg, a.requests, a.period, a.burst)
	if err != nil {
		p.errorf(block, path, "%v", err)
		return algorithms.Limit{}, false
	}
	return r, true
}

// yaml11Bools are the booleans of YAML 1.1, which envoyproxy/ratelimit's
// YAML parser (yaml.v2) reads and YAML 1.2 reads as strings.
var yaml11Bools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false, "off": false, "Off": false, "OFF": false,
}

// boolean returns the boolean y, false when y is missing or null.
func (p *parser) boolean(y *yaml.Node, path string) bool {
	if y == nil || yamlnode.IsNull(y) {
		return false
	}
	if y.Kind == yaml.ScalarNode {
		if y.ShortTag() == "!!bool" {
			var b bool
			if y.Decode(&b) == nil {
				return b
			}
		}
		if b, ok := yaml11Bools[y.Value]; ok && y.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) == 0 {
			return b
		}
	}
	p.errorf(y, path, "want true or false; got %s", yamlnode.Describe(y))
	return false
}

// integer returns the whole number y, which must be within [min, max]; 0
// when y is missing or null. ok is false when y has a problem.
func (p *parser) integer(y *yaml.Node, path string, min, max int64) (n int64, ok bool) {
	if y == nil || yamlnode.IsNull(y) {
		return 0, true
	}
	if y.Kind != yaml.ScalarNode || y.ShortTag() != "!!int" {
		p.errorf(y, path, "want a whole number; got %s", yamlnode.Describe(y))
		return 0, false
	}
	if err := y.Decode(&n); err != nil {
		p.errorf(y, path, "%s is too large (at most %d)", y.Value, max)
		return 0, false
	}
	switch {
	case n < min && n < 0:
		p.errorf(y, path, "negative: %d (want at least %d)", n, min)
		return 0, false
	case n < min:
		p.errorf(y, path, "%d is too small (want at least %d)", n, min)
		return 0, false
	case n > max:
		p.errorf(y, path, "%d is too large (at most %d)", n, max)
		return 0, false
	}
	return n, true
}

package docsnippets

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Rule checks a value a page says varies (a duration that depends on when
// the calls were made, say) instead of comparing it with the sample's.
type Rule func(actual any) error

// Ellipsis in a sample's JSON object ({"name": "per-user", …}) stands for
// fields not shown: the object matches an answer that has more.
const Ellipsis = "…"

var ellipsisField = regexp.MustCompile(`(,\s*|\{\s*)` + Ellipsis)

// MatchJSON compares a command's JSON answer with a page's sample
// structurally: the same objects with the same fields, arrays of the same
// length, equal strings, numbers (by their text) and literals, whatever the
// layout. A field at a path of vary ("statuses.1.retryAfter": keys and array
// indices joined by dots; "*" for any index: "statuses.*.chargedAt") is
// checked by its rule instead, and each path must be in the sample, so
// that a rule cannot outlive the sample it was for.
// The error names every difference.
func MatchJSON(sample, actual string, vary map[string]Rule) error {
	sample = ellipsisField.ReplaceAllString(sample, `$1"`+Ellipsis+`": true`)
	want, err := decode(sample)
	if err != nil {
		return fmt.Errorf("the sample is not JSON: %v", err)
	}
	got, err := decode(actual)
	if err != nil {
		return fmt.Errorf("the answer is not JSON: %v\n%s", err, actual)
	}
	m := matcher{vary: vary, used: map[string]bool{}}
	m.match("", want, got)
	for path := range vary {
		if !m.used[path] {
			m.problems = append(m.problems, path+": a varying field the sample does not have")
		}
	}
	if len(m.problems) > 0 {
		sort.Strings(m.problems)
		return fmt.Errorf("the answer differs from the sample:\n  %s\nanswer:\n%s", strings.Join(m.problems, "\n  "), actual)
	}
	return nil
}

func decode(s string) (any, error) {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, errors.New("more than one JSON value")
	}
	return v, nil
}

type matcher struct {
	vary     map[string]Rule
	used     map[string]bool
	problems []string
}

func (m *matcher) fail(path, format string, args ...any) {
	if path == "" {
		path = "(top)"
	}
	m.problems = append(m.problems, path+": "+fmt.Sprintf(format, args...))
}

func (m *matcher) match(path string, want, got any) {
	key := path
	if _, ok := m.vary[key]; !ok {
		key = anyIndex(path)
	}
	if rule, ok := m.vary[key]; ok {
		m.used[key] = true
		if err := rule(got); err != nil {
			m.fail(path, "%v", err)
		}
		return
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			m.fail(path, "want an object, got %s", show(got))
			return
		}
		_, more := w[Ellipsis]
		for k, wv := range w {
			if k == Ellipsis {
				continue
			}
			gv, ok := g[k]
			if !ok {
				m.fail(join(path, k), "missing")
				continue
			}
			m.match(join(path, k), wv, gv)
		}
		if !more {
			for k, gv := range g {
				if _, ok := w[k]; !ok {
					m.fail(join(path, k), "not in the sample: %s", show(gv))
				}
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			m.fail(path, "want %d elements, got %s", len(w), show(got))
			return
		}
		for i := range w {
			m.match(join(path, strconv.Itoa(i)), w[i], g[i])
		}
	default:
		if show(want) != show(got) {
			m.fail(path, "want %s, got %s", show(want), show(got))
		}
	}
}

// anyIndex is path with each array index written as "*", the form of a
// vary path that holds for every element: "statuses.*.chargedAt".
func anyIndex(path string) string {
	parts := strings.Split(path, ".")
	for i, p := range parts {
		if _, err := strconv.Atoi(p); err == nil {
			parts[i] = "*"
		}
	}
	return strings.Join(parts, ".")
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func show(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// DurationWithin is a rule for a JSON duration ("0.093424707s") that must lie
// within [min, max].
func DurationWithin(min, max time.Duration) Rule {
	return func(actual any) error {
		s, ok := actual.(string)
		if !ok {
			return fmt.Errorf("want a duration, got %s", show(actual))
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("want a duration, got %q", s)
		}
		if d < min || d > max {
			return fmt.Errorf("%s is outside [%v, %v]", s, min, max)
		}
		return nil
	}
}

// IntegerWithin is a rule for an integer, written as a number or a string
// ("2735"), that must lie within [min, max].
func IntegerWithin(min, max int64) Rule {
	return func(actual any) error {
		s := strings.Trim(show(actual), `"`)
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return fmt.Errorf("want an integer, got %s", show(actual))
		}
		if n < min || n > max {
			return fmt.Errorf("%d is outside [%d, %d]", n, min, max)
		}
		return nil
	}
}

// MatchText compares a command's output with a page's sample as text: the
// same lines, ignoring trailing spaces and blank lines at either end.
func MatchText(sample, actual string) error {
	if normalize(sample) != normalize(actual) {
		return fmt.Errorf("the output differs from the sample:\nwant:\n%s\ngot:\n%s", sample, actual)
	}
	return nil
}

func normalize(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t\r")
	}
	return strings.Join(lines, "\n")
}

// Check reports whether a command's output (stdout and stderr together) and
// exit status show the expected outcome: for a CODE_ expectation, a JSON
// answer with that overall code (and the first status's remaining), exit
// status 0; for a gRPC error, grpcurl's "Code:" and "Message:" lines.
func (e Expectation) Check(output string, exitCode int) error {
	if strings.HasPrefix(e.Code, "CODE_") {
		if exitCode != 0 {
			return fmt.Errorf("want %s, got exit status %d:\n%s", e.Code, exitCode, output)
		}
		var answer struct {
			OverallCode string `json:"overallCode"`
			Statuses    []struct {
				Remaining string `json:"remaining"`
			} `json:"statuses"`
		}
		if err := json.Unmarshal(bytes.TrimSpace([]byte(output)), &answer); err != nil {
			return fmt.Errorf("want a JSON answer: %v\n%s", err, output)
		}
		if answer.OverallCode != e.Code {
			return fmt.Errorf("want %s, got %q:\n%s", e.Code, answer.OverallCode, output)
		}
		if e.Remaining != "" && (len(answer.Statuses) == 0 || answer.Statuses[0].Remaining != e.Remaining) {
			return fmt.Errorf("want remaining %s:\n%s", e.Remaining, output)
		}
		return nil
	}
	if exitCode == 0 || !strings.Contains(output, "Code: "+e.Code+"\n") || !strings.Contains(output, e.Message) {
		return fmt.Errorf("want the error %s %q (exit status %d):\n%s", e.Code, e.Message, exitCode, output)
	}
	return nil
}

// TimeNear is a rule for a JSON timestamp in RFC 3339
// ("2026-11-28T12:00:00.123456789Z") that must lie within d of the moment
// the rule is applied: the instant a daemon reports for what it just
// decided.
func TimeNear(d time.Duration) Rule {
	return func(actual any) error {
		s, ok := actual.(string)
		if !ok {
			return fmt.Errorf("want a timestamp, got %s", show(actual))
		}
		at, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return fmt.Errorf("want an RFC 3339 timestamp, got %q", s)
		}
		if off := time.Since(at); off > d || off < -d {
			return fmt.Errorf("%s is %v from now, more than %v", s, off.Round(time.Second), d)
		}
		return nil
	}
}

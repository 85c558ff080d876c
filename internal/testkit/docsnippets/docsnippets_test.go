package docsnippets

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

const page = "Text.\n\n```sh\necho hi\n```\n\n```json\n{\"a\": 1}\n```\n\nProse between.\n\n```sh\necho two\n```\nprose\n```\nnot an output\n```\n" +
	"- item:\n\n  ```sh\n  indented\n  ```\n  ```\n  its output\n  ```\n```yaml\nk: v\n```\n```\nafter yaml\n```\n"

func TestParse(t *testing.T) {
	blocks := Parse(page)
	var got []string
	for _, b := range blocks {
		out := "-"
		if b.Output != nil {
			out = strings.TrimSpace(b.Output.Text)
		}
		got = append(got, b.Lang+"|"+strings.TrimSpace(b.Text)+"|"+out)
	}
	want := []string{
		`sh|echo hi|{"a": 1}`,
		`json|{"a": 1}|-`,
		"sh|echo two|-", // prose between: not its output
		"|not an output|-",
		"sh|indented|its output",
		"|its output|-",
		"yaml|k: v|-", // only command blocks have outputs
		"|after yaml|-",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("Parse:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if blocks[0].Line != 3 || blocks[0].FirstLine() != "echo hi" {
		t.Errorf("first block at line %d, %q", blocks[0].Line, blocks[0].FirstLine())
	}
}

func TestMatchJSON(t *testing.T) {
	sample := `{"code": "OVER", "retryAfter": "0.093424707s", "rule": {"name": "r", …}, "n": ["1", 2]}`
	vary := map[string]Rule{"retryAfter": DurationWithin(1, 100*time.Millisecond)}
	for _, c := range []struct {
		answer, problem string // problem: "" for a match
	}{
		{`{"n":["1",2],"rule":{"name":"r","burst":7},"retryAfter":"0.1s","code":"OVER"}`, ""},
		{`{"n":["1",2],"rule":{"name":"r"},"retryAfter":"0.000001s","code":"OVER"}`, ""},
		{`{"n":["1",2],"rule":{"name":"r"},"retryAfter":"0.2s","code":"OVER"}`, "retryAfter: 0.2s is outside"},
		{`{"n":["1",2],"rule":{"name":"r"},"retryAfter":"0.1s","code":"OK"}`, `code: want "OVER", got "OK"`},
		{`{"n":["1",2],"rule":{"name":"r"},"retryAfter":"0.1s","code":"OVER","extra":true}`, "extra: not in the sample"},
		{`{"n":["1"],"rule":{"name":"r"},"retryAfter":"0.1s","code":"OVER"}`, "n: want 2 elements"},
		{`{"n":["1",2],"rule":{},"retryAfter":"0.1s","code":"OVER"}`, "rule.name: missing"},
		{`{"n":[1,2],"rule":{"name":"r"},"retryAfter":"0.1s","code":"OVER"}`, `n.0: want "1", got 1`},
	} {
		err := MatchJSON(sample, c.answer, vary)
		if (err == nil) != (c.problem == "") || err != nil && !strings.Contains(err.Error(), c.problem) {
			t.Errorf("MatchJSON(%s) = %v, want %q", c.answer, err, c.problem)
		}
	}
	if err := MatchJSON(`{"a": "1s"}`, `{"a": "1s"}`, map[string]Rule{"b": DurationWithin(0, 1)}); err == nil || !strings.Contains(err.Error(), "b: a varying field the sample does not have") {
		t.Errorf("a stale rule: %v", err)
	}
	if err := MatchJSON(`{"h": "2735"}`, `{"h": "3601"}`, map[string]Rule{"h": IntegerWithin(1, 3600)}); err == nil {
		t.Error("IntegerWithin admitted 3601")
	}
	now := time.Now().UTC()
	at := map[string]Rule{"s.*.at": TimeNear(time.Minute)}
	sample = `{"s": [{"at": "2026-11-28T12:00:00Z"}, {"at": "2026-11-28T12:00:00Z"}]}`
	for _, c := range []struct {
		answer, problem string
	}{
		{fmt.Sprintf(`{"s": [{"at": %q}, {"at": %q}]}`, now.Format(time.RFC3339Nano), now.Add(-30*time.Second).Format(time.RFC3339Nano)), ""},
		{fmt.Sprintf(`{"s": [{"at": %q}, {"at": %q}]}`, now.Format(time.RFC3339Nano), now.Add(-time.Hour).Format(time.RFC3339Nano)), "s.1.at: "},
		{fmt.Sprintf(`{"s": [{"at": "yesterday"}, {"at": %q}]}`, now.Format(time.RFC3339Nano)), `s.0.at: want an RFC 3339 timestamp`},
	} {
		err := MatchJSON(sample, c.answer, at)
		if (err == nil) != (c.problem == "") || err != nil && !strings.Contains(err.Error(), c.problem) {
			t.Errorf("MatchJSON(%s) with s.*.at = %v, want %q", c.answer, err, c.problem)
		}
	}
}

func TestExpectations(t *testing.T) {
	for _, c := range []struct {
		line, command string
		want          Expectation
		ok            bool
	}{
		{`call billing billing "$alice"       # CODE_OK, remaining 2`, `call billing billing "$alice"`, Expectation{Code: "CODE_OK", Remaining: "2"}, true},
		{`call dashboard shop "$alice_peek"   # CODE_OK, remaining 2: what shop's alice has left`, `call dashboard shop "$alice_peek"`, Expectation{Code: "CODE_OK", Remaining: "2"}, true},
		{`call b shop "$a" -H x   # PermissionDenied: client "batch" may not call domain "shop"`, `call b shop "$a" -H x`, Expectation{Code: "PermissionDenied", Message: `client "batch" may not call domain "shop"`}, true},
		{`go run ./cmd/ratelimitd          # serve on 127.0.0.1:8081`, `go run ./cmd/ratelimitd          # serve on 127.0.0.1:8081`, Expectation{}, false},
	} {
		command, e, ok := ParseExpectation(c.line)
		if command != c.command || e != c.want || ok != c.ok {
			t.Errorf("ParseExpectation(%s) = %q, %+v, %v", c.line, command, e, ok)
		}
	}
	denied := "ERROR:\n  Code: PermissionDenied\n  Message: authorization: client \"batch\" may not call domain \"shop\"\n"
	e := Expectation{Code: "PermissionDenied", Message: `client "batch" may not call domain "shop"`}
	if err := e.Check(denied, 1); err != nil {
		t.Error(err)
	}
	if err := (Expectation{Code: "Unauthenticated"}).Check(denied, 1); err == nil {
		t.Error("Unauthenticated matched a PermissionDenied")
	}
	ok := `{"overallCode": "CODE_OK", "statuses": [{"remaining": "2"}]}`
	if err := (Expectation{Code: "CODE_OK", Remaining: "2"}).Check(ok, 0); err != nil {
		t.Error(err)
	}
	if err := (Expectation{Code: "CODE_OK", Remaining: "1"}).Check(ok, 0); err == nil {
		t.Error("remaining 1 matched remaining 2")
	}
	if err := e.Check(ok, 0); err == nil {
		t.Error("an answer matched an error")
	}
}

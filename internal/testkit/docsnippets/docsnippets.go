// Package docsnippets reads the fenced code blocks of a Markdown page and
// compares what a block's commands print with the sample output the page
// shows after it, so that a test can prove the page's commands reproduce as
// typed.
//
// A command block's (```sh, ```python, ```js) sample output is the fenced
// block that follows it with nothing but blank lines between, when that block is ```json (compared as JSON by
// [MatchJSON]) or has no language (compared as text by [MatchText]).
//
// A command line may also carry its expected outcome as a trailing comment,
// read by [ParseExpectation]: `# CODE_OK, remaining 2` (the overall code of a
// JSON answer, and the first status's remaining) or `# PermissionDenied:
// message` (a gRPC error's code, and text its message contains).
package docsnippets

import (
	"regexp"
	"strings"
)

// Block is one fenced code block of a page.
type Block struct {
	Line int    // 1-based line of the opening fence
	Lang string // the info string's first word: "sh", "json", "" for none
	Text string // the lines between the fences, each ending in a newline
	// Output is the sample output shown after the block, or nil.
	Output *Block
}

// FirstLine is the block's first line, which names it in test tables.
func (b *Block) FirstLine() string {
	line, _, _ := strings.Cut(b.Text, "\n")
	return line
}

// Parse returns the page's fenced code blocks in order, each with the sample
// output that follows it linked as Output (an output block is also in the
// list). Fences are lines starting with ``` , indented or not (in a list
// item; the fence's indentation is removed from the block's lines); an
// unclosed block runs to the end of the page.
func Parse(markdown string) []*Block {
	var (
		blocks  []*Block
		open    *Block
		blank   = true // only blank lines since the last block closed
		prev    *Block
		builder strings.Builder
	)
	indent := 0 // of the open block's fence, removed from its lines
	for i, line := range strings.Split(markdown, "\n") {
		fence := strings.TrimLeft(line, " ")
		if open != nil {
			if strings.HasPrefix(fence, "```") {
				open.Text = builder.String()
				builder.Reset()
				prev, open, blank = open, nil, true
				continue
			}
			for n := 0; n < indent && strings.HasPrefix(line, " "); n++ {
				line = line[1:]
			}
			builder.WriteString(line + "\n")
			continue
		}
		if strings.HasPrefix(fence, "```") {
			indent = len(line) - len(fence)
			lang, _, _ := strings.Cut(strings.TrimSpace(strings.TrimPrefix(fence, "```")), " ")
			open = &Block{Line: i + 1, Lang: lang}
			if prev != nil && blank && (lang == "json" || lang == "") && commandLangs[prev.Lang] {
				prev.Output = open
			}
			blocks = append(blocks, open)
			continue
		}
		if strings.TrimSpace(line) != "" {
			blank = false
		}
	}
	if open != nil {
		open.Text = builder.String()
	}
	return blocks
}

// commandLangs are the languages of blocks whose output a page may show.
var commandLangs = map[string]bool{"sh": true, "python": true, "js": true}

// Expectation is the outcome a command line's trailing comment states.
type Expectation struct {
	// Code is a ratelimit.v1 overall code (CODE_OK) or a gRPC error code's
	// name (PermissionDenied).
	Code string
	// Remaining, for a CODE_ expectation, is the first status's remaining.
	Remaining string
	// Message, for a gRPC error, is text the error's message contains.
	Message string
}

var (
	decisionComment = regexp.MustCompile(`\s+#\s+(CODE_[A-Z_]+)(?:, remaining (\d+))?(?::.*)?$`)
	errorComment    = regexp.MustCompile(`\s+#\s+(OK|Canceled|Unknown|InvalidArgument|DeadlineExceeded|NotFound|AlreadyExists|PermissionDenied|ResourceExhausted|FailedPrecondition|Aborted|OutOfRange|Unimplemented|Internal|Unavailable|DataLoss|Unauthenticated)(?::\s+(.*))?$`)
)

// ParseExpectation splits a one-line command from its trailing expectation
// comment. ok is false when the line has none.
func ParseExpectation(line string) (command string, e Expectation, ok bool) {
	if m := decisionComment.FindStringSubmatchIndex(line); m != nil {
		return line[:m[0]], Expectation{Code: line[m[2]:m[3]], Remaining: group(line, m, 2)}, true
	}
	if m := errorComment.FindStringSubmatchIndex(line); m != nil {
		return line[:m[0]], Expectation{Code: line[m[2]:m[3]], Message: group(line, m, 2)}, true
	}
	return line, Expectation{}, false
}

func group(s string, m []int, i int) string {
	if m[2*i] < 0 {
		return ""
	}
	return s[m[2*i]:m[2*i+1]]
}

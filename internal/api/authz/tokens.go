package authz

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
)

// Token is a bearer token a caller presented. Its value never leaves the
// package: String, GoString and its slog value are "[redacted]", and it is
// compared only by keyed digest.
type Token struct {
	value string
}

// BearerToken returns the token value as a Token (empty for none).
func BearerToken(value string) Token { return Token{value: value} }

// IsZero reports whether no token was presented.
func (t Token) IsZero() bool { return t.value == "" }

// String returns "[redacted]" (or "" for no token).
func (t Token) String() string {
	if t.value == "" {
		return ""
	}
	return "[redacted]"
}

// GoString returns the same as String, so %#v shows no token either.
func (t Token) GoString() string { return t.String() }

// LogValue keeps tokens out of structured logs.
func (t Token) LogValue() slog.Value { return slog.StringValue(t.String()) }

// MarshalText keeps tokens out of JSON and YAML encodings.
func (t Token) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// digest is a token's keyed digest, the only form a policy keeps.
type digest [sha256.Size]byte

// tokenKey keys the digests; drawn once per process, never stored.
var tokenKey = func() []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		panic("authz: no randomness for the token key: " + err.Error())
	}
	return k
}()

// macs holds keyed hashes for reuse: hmac.New costs several allocations.
var macs = sync.Pool{New: func() any { return hmac.New(sha256.New, tokenKey) }}

func digestOf(token string) digest {
	m := macs.Get().(hash.Hash)
	m.Reset()
	io.WriteString(m, token)
	var d digest
	m.Sum(d[:0])
	macs.Put(m)
	return d
}

// Token length bounds, in bytes.
const (
	minTokenLen = 16
	maxTokenLen = 512
)

// tokenSyntax checks t against RFC 6750's b64token: 1*( ALPHA / DIGIT /
// "-" / "." / "_" / "~" / "+" / "/" ) *"=", and the length bounds. The
// problem it returns never quotes the token.
func tokenSyntax(t string) string {
	switch {
	case len(t) < minTokenLen:
		return fmt.Sprintf("a token of %d characters; want at least %d", len(t), minTokenLen)
	case len(t) > maxTokenLen:
		return fmt.Sprintf("a token of %d characters; want at most %d", len(t), maxTokenLen)
	}
	body := strings.TrimRight(t, "=")
	if body == "" {
		return "a token of only '=' characters"
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~+/", c) >= 0) {
			return fmt.Sprintf("a token with a character outside A-Z a-z 0-9 - . _ ~ + / at position %d", i+1)
		}
	}
	return ""
}

// readTokens adds the tokens of the token file at path, whose bytes are
// data, to the policy, for clients.
func (ps *parser) readTokens(path string, data []byte, clients []*client) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxFileBytes+1)
	line, n := 0, 0
	for sc.Scan() {
		line++
		t := strings.TrimSpace(sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if problem := tokenSyntax(t); problem != "" {
			ps.errorAt(path, line, "", problem)
			continue
		}
		if ps.nTokens++; ps.nTokens > MaxTokens {
			ps.errorAt(path, line, "", fmt.Sprintf("more than %d tokens in the policy's token files", MaxTokens))
			return
		}
		n++
		d := digestOf(t)
		for _, c := range clients {
			if !slices.Contains(ps.p.byToken[d], c) {
				ps.p.byToken[d] = append(ps.p.byToken[d], c)
			}
		}
	}
	if err := sc.Err(); err != nil {
		ps.errorAt(path, line+1, "", err.Error())
		return
	}
	if n == 0 {
		ps.errorAt(path, 0, "", "no tokens (one a line; blank lines and lines starting with # are skipped)")
	}
}

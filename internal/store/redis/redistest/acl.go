package redistest

import (
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// RecommendedACL returns, as arguments (ACL SETUSER ratelimitd ...), the
// ACL line that docs/redis.md recommends, so that tests run exactly what
// the documentation says.
func RecommendedACL(t testing.TB) []string {
	t.Helper()
	_, here, _, _ := runtime.Caller(0)
	doc, err := os.ReadFile(filepath.Join(filepath.Dir(here), "../../../../docs/redis.md"))
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^\s*ACL SETUSER ratelimitd .*$`).Find(doc)
	if line == nil {
		t.Fatal("docs/redis.md recommends no ACL SETUSER ratelimitd line")
	}
	return strings.Fields(string(line))
}

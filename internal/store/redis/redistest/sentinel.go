package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SentinelMaster is the master's name that StartSentinels' sentinels
// monitor.
const SentinelMaster = "mymaster"

// Sentinels is a master, a replica of it, and three redis-server
// --sentinel processes monitoring the master (a quorum of two), which
// promote the replica within about DownAfter plus a second of the master's
// death.
type Sentinels struct {
	Master, Replica *Server
	sentinels       []*Server
	// DownAfter is the sentinels' down-after-milliseconds: how long the
	// master must be unreachable before they agree it is down.
	DownAfter time.Duration
}

// StartSentinels starts the master, its replica and three sentinels on
// free loopback ports, and waits until the sentinels know the replica.
func StartSentinels(t testing.TB) *Sentinels {
	t.Helper()
	s := &Sentinels{Master: Start(t), DownAfter: time.Second}
	s.Replica = newServer(t, freePort(t, false))
	s.Replica.args = append(s.Replica.args, "--replicaof", "127.0.0.1", strconv.Itoa(s.Master.port))
	s.Replica.start()
	for range 3 {
		port := freePort(t, false)
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("bind 127.0.0.1\nport %d\ndir %s\nlogfile %s\n"+
			"sentinel monitor %s 127.0.0.1 %d 2\nsentinel down-after-milliseconds %s %d\n"+
			"sentinel failover-timeout %s 10000\nsentinel parallel-syncs %s 1\n",
			port, dir, filepath.Join(dir, "sentinel.log"), SentinelMaster, s.Master.port,
			SentinelMaster, s.DownAfter.Milliseconds(), SentinelMaster, SentinelMaster)
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		sn := &Server{t: t, dir: dir, port: port, args: []string{conf, "--sentinel"}}
		t.Cleanup(sn.Stop)
		sn.start()
		s.sentinels = append(s.sentinels, sn)
	}
	// A sentinel learns of the replica from the master's INFO (every 10s
	// at first) and of the other sentinels by hello messages: until both,
	// no failover can happen.
	deadline := time.Now().Add(30 * time.Second)
	for _, sn := range s.sentinels {
		for {
			out := sn.cli(t, "SENTINEL", "MASTER", SentinelMaster)
			if fieldIs(out, "num-slaves", "1") && fieldIs(out, "num-other-sentinels", "2") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("sentinel %s does not know the replica and the other sentinels within 30s:\n%s", sn.Addr(), out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return s
}

// Addrs returns the sentinels' addresses, comma-separated.
func (s *Sentinels) Addrs() string {
	var a []string
	for _, sn := range s.sentinels {
		a = append(a, sn.Addr())
	}
	return strings.Join(a, ",")
}

// MasterAddr returns the master's address as the first sentinel reports it.
func (s *Sentinels) MasterAddr(t testing.TB) string {
	t.Helper()
	f := strings.Fields(s.sentinels[0].cli(t, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster))
	if len(f) != 2 {
		return ""
	}
	return f[0] + ":" + f[1]
}

// cli runs redis-cli against the server and returns its output.
func (s *Server) cli(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("redis-cli", append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(s.port)}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// Cli runs redis-cli against the server with args and returns its output.
func (s *Server) Cli(t testing.TB, args ...string) string { return s.cli(t, args...) }

// fieldIs reports whether redis-cli's output of a flat map (a name line,
// then its value line) has name with value.
func fieldIs(out, name, value string) bool {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := 0; i+1 < len(lines); i++ {
		if strings.TrimSpace(lines[i]) == name {
			return strings.TrimSpace(lines[i+1]) == value
		}
	}
	return false
}

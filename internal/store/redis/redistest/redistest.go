// Package redistest starts real redis-server processes for tests: a
// standalone server or a three-node cluster, each on free loopback ports in
// a temporary directory, stopped when the test ends; and a Proxy that puts
// faults between a client and a server.
//
// A test that needs Redis fails (never skips) when redis-server or
// redis-cli is not installed: `apt-get install redis-server redis-tools`.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is one redis-server process.
type Server struct {
	t    testing.TB
	dir  string
	port int
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// Start starts a standalone redis-server on a free loopback port, with no
// persistence, and stops it when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s := newServer(t, freePort(t, false))
	s.start()
	return s
}

func newServer(t testing.TB, port int) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is not installed (apt-get install redis-server redis-tools): %v", err)
	}
	dir := t.TempDir()
	s := &Server{t: t, dir: dir, port: port, args: []string{
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(port),
		"--dir", dir,
		"--save", "",
		"--appendonly", "no",
		"--logfile", filepath.Join(dir, "redis.log"),
	}}
	t.Cleanup(s.Stop)
	return s
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

func (s *Server) start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	cmd := exec.Command("redis-server", s.args...)
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("starting redis-server: %v", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		if reply, err := s.command("PING"); err == nil && reply == "+PONG" {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("redis-server on %s did not answer PING within 10s; its log:\n%s", s.Addr(), log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop kills the server (a crash, not a shutdown); it can be started again
// with Restart. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Restart starts a stopped server again on the same port, empty (no
// persistence, and no cached scripts).
func (s *Server) Restart() { s.start() }

// Command sends one command in RESP to the server and returns the first
// line of the reply ("+OK", "-ERR ...", ":1", "$5" ...), for test set-up.
func (s *Server) Command(args ...string) (string, error) { return s.command(args...) }

func (s *Server) command(args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimRight(line, "\r\n"), err
}

// Cluster is a three-node Redis Cluster (three masters, no replicas),
// each node behind a Proxy: the nodes announce their proxies' ports, so
// that clients reach every node through its proxy and a test can make
// faults on one node.
type Cluster struct {
	Nodes   []*Server
	Proxies []*Proxy // Proxies[i] is in front of Nodes[i]
}

// StartCluster starts three cluster-enabled servers on free loopback ports
// (each port p with its bus port p+10000 free), each behind a Proxy whose
// port it announces to clients, joins them with `redis-cli --cluster
// create`, and waits until every node reports cluster_state:ok and tells
// clients the proxies' addresses. They stop when the test ends.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli is not installed (apt-get install redis-tools): %v", err)
	}
	c := &Cluster{}
	var addrs []string
	for range 3 {
		s := newServer(t, freePort(t, true))
		p := StartProxy(t, s.Addr())
		s.args = append(s.args,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(s.dir, "nodes.conf"),
			"--cluster-node-timeout", "5000",
			"--cluster-announce-port", strconv.Itoa(p.Port()),
			"--cluster-announce-bus-port", strconv.Itoa(s.port+10000))
		s.start()
		c.Nodes = append(c.Nodes, s)
		c.Proxies = append(c.Proxies, p)
		addrs = append(addrs, s.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range c.Nodes {
		for !s.clusterOK() || !c.announced(s) {
			if time.Now().After(deadline) {
				t.Fatalf("cluster node %s not ok, or not announcing the proxies, within 30s", s.Addr())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// Addrs returns the addresses clients use: the nodes' proxies.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, p := range c.Proxies {
		a = append(a, p.Addr())
	}
	return a
}

// Owner returns the index of the node that holds key's hash slot (the one
// that does not answer a command on key with MOVED).
func (c *Cluster) Owner(t testing.TB, key string) int {
	t.Helper()
	for i, s := range c.Nodes {
		reply, err := s.Command("EXISTS", key)
		if err != nil {
			t.Fatalf("EXISTS on %s: %v", s.Addr(), err)
		}
		if !strings.HasPrefix(reply, "-MOVED") {
			return i
		}
	}
	t.Fatalf("no node holds the slot of %q", key)
	return -1
}

// announced reports whether s tells clients (CLUSTER SLOTS) the proxies'
// ports and no node's own.
func (c *Cluster) announced(s *Server) bool {
	out, err := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "cluster", "slots").Output()
	if err != nil {
		return false
	}
	ports := make(map[string]bool)
	for _, line := range strings.Split(string(out), "\n") {
		ports[strings.TrimSpace(line)] = true
	}
	for i, n := range c.Nodes {
		if ports[strconv.Itoa(n.port)] || !ports[strconv.Itoa(c.Proxies[i].Port())] {
			return false
		}
	}
	return true
}

func (s *Server) clusterOK() bool {
	out, err := exec.Command("redis-cli", "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "cluster", "info").Output()
	return err == nil && strings.Contains(string(out), "cluster_state:ok")
}

// freePort returns a loopback port that was free a moment ago (and, with
// bus, whose cluster bus port, 10000 higher, was free too).
func freePort(t testing.TB, bus bool) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if !bus {
			l.Close()
			return port
		}
		if port+10000 > 65535 {
			l.Close()
			continue
		}
		b, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		l.Close()
		if err == nil {
			b.Close()
			return port
		}
	}
	t.Fatal("no free loopback port pair found")
	return 0
}

// Command floodclient sends a daemon a key flood (package keyflood) and
// exits 0 once every request was admitted, or prints the first error and
// exits 1. cmd/ratelimitd's TestKeyFlood builds and runs it, so that the
// flood's client runs without the race detector, at a fifth of the CPU.
//
//	floodclient -addr 127.0.0.1:8081 -method /ratelimit.v1.RateLimitService/ShouldRateLimit \
//	  -values 1280000 -entries 1 -hits 4000 -value-len 1024 [-limit HEX]
package main

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratelimitd/ratelimitd/internal/testkit/keyflood"
)

func main() {
	addr := flag.String("addr", "", "the daemon's gRPC address")
	var r keyflood.Request
	flag.StringVar(&r.Method, "method", "", "the gRPC method")
	values := flag.Int("values", 0, "how many distinct values to send")
	flag.IntVar(&r.Entries, "entries", 1, "entries per descriptor")
	hits := flag.Uint("hits", 0, "the request's hits (0: none sent)")
	flag.IntVar(&r.ValueLen, "value-len", keyflood.MaxValueLen, "the length of a value")
	limit := flag.String("limit", "", "each descriptor's encoded ratelimit.v1 limit, in hex")
	senders := flag.Int("senders", 4, "requests in flight at once")
	flag.Parse()
	r.Hits = uint32(*hits)
	if err := run(*addr, r, *limit, *values, *senders); err != nil {
		fmt.Fprintln(os.Stderr, "floodclient:", err)
		os.Exit(1)
	}
}

func run(addr string, r keyflood.Request, limit string, values, senders int) error {
	if addr == "" || r.Method == "" || values <= 0 || r.Entries < 1 || r.Entries > len(keyflood.Keys) ||
		r.ValueLen < 1 || r.ValueLen > keyflood.MaxValueLen || senders < 1 {
		return fmt.Errorf("bad flags: -addr, -method and -values are needed; -entries 1 to %d, -value-len 1 to %d, -senders at least 1", len(keyflood.Keys), keyflood.MaxValueLen)
	}
	if limit != "" {
		b, err := hex.DecodeString(limit)
		if err != nil {
			return fmt.Errorf("-limit: %w", err)
		}
		r.Limit = b
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	return keyflood.Send(context.Background(), conn, r, values, senders)
}

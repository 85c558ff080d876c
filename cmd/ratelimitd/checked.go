package main

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// The flags below check their values when they are set, so that a value
// from the command line and one from envoyproxy/ratelimit's environment
// (applyUpstreamEnv sets flags with fs.Set) meet the one check, written
// here once, and a refusal names the flag (and the variable).

// positiveDuration is a duration flag that refuses 0 and negative
// durations: a timeout or a wait of zero would give up (or retry) at once,
// and reading it as "the default" would quietly put another value in force
// than the one given.
type positiveDuration time.Duration

func (d *positiveDuration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want a duration such as 250ms or 3s")
	}
	if v <= 0 {
		return errors.New("want a positive duration")
	}
	*d = positiveDuration(v)
	return nil
}

func (d positiveDuration) String() string { return time.Duration(d).String() }

// maxXDSMessageBytes bounds --xds-max-message-bytes: 16 times gRPC's
// default of 4 MiB. A response is held whole while it is decoded, so a
// larger bound would let one control-plane message take the daemon past
// its memory bound; a policy of the default 100,000 descriptors is about
// 2 MB.
const maxXDSMessageBytes = 64 << 20

// messageBytes is --xds-max-message-bytes: a whole number of bytes from 0
// (gRPC's default, 4 MiB) to maxXDSMessageBytes.
type messageBytes int

func (n *messageBytes) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 || v > maxXDSMessageBytes {
		return fmt.Errorf("want a whole number of bytes from 0 (gRPC's default, 4 MiB) to %d (64 MiB)", maxXDSMessageBytes)
	}
	*n = messageBytes(v)
	return nil
}

func (n messageBytes) String() string { return strconv.Itoa(int(n)) }

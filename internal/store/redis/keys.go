package redis

import (
	"strconv"
	"time"
)

// redisKeyLen returns the length of the key redisKey appends.
func redisKeyLen(prefix, domain string, key []byte, spread bool) int {
	n := len(prefix) + len(key)
	if !spread {
		n += len(domain) + 2
	}
	return n
}

// redisKey returns the Redis key of a bucket: the prefix, the hash tag
// {domain} unless spread, then the bucket key as the engine made it.
//
// With the tag, Redis Cluster hashes only the domain, so every bucket of one
// domain, and so every charge of one request, is in one hash slot. A domain
// holding a '}' still tags every key of that domain alike (Redis hashes up
// to the first '}'); an empty domain makes an empty tag, and then Redis
// hashes the whole key.
func redisKey(buf []byte, prefix, domain string, key []byte, spread bool) []byte {
	buf = append(buf, prefix...)
	if !spread {
		buf = append(buf, '{')
		buf = append(buf, domain...)
		buf = append(buf, '}')
	}
	return append(buf, key...)
}

// counterKey appends the Redis key of a fixed window kept as a counter, as
// envoyproxy/ratelimit names its counters: the prefix, counter (the
// charge's store.Charge.Counter, "<domain>_<key>_<value>_…_"), then the
// start of the window of period that holds now, in Unix seconds. Without a
// hash tag: a cluster hashes the whole key.
func counterKey(buf []byte, prefix string, counter []byte, now int64, period time.Duration) []byte {
	buf = append(buf, prefix...)
	buf = append(buf, counter...)
	p := int64(period)
	return strconv.AppendInt(buf, (now-now%p)/int64(time.Second), 10)
}

// slotOf returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag — the bytes between the first '{' and the first '}' after it,
// when there are any — or of the whole key, modulo 16384.
func slotOf(key []byte) int {
	for i, c := range key {
		if c != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j > i+1 {
					key = key[i+1 : j]
				}
				return int(crc16(key) & 16383)
			}
		}
		break
	}
	return int(crc16(key) & 16383)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum
// of the Redis Cluster specification.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

package redis

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/ratelimitd/ratelimitd/internal/store/redis/redistest"
)

// bignumCalc runs bignum.lua's operations in a real Redis: ARGV is triples
// (operation, a, b) in hexadecimal, the reply one result per triple
// (divmod: "q r").
const bignumCalc = `
local out = {}
for i = 1, #ARGV, 3 do
  local op, a, b = ARGV[i], fromhex(ARGV[i + 1]), fromhex(ARGV[i + 2])
  local r
  if op == "add" then r = tohex(add(a, b))
  elseif op == "sub" then r = tohex(sub(a, b))
  elseif op == "csub" then r = tohex(csub(a, b))
  elseif op == "mul" then r = tohex(mul(a, b))
  elseif op == "cmp" then r = tostring(cmp(a, b))
  elseif op == "divmod" then local q, m = divmod(a, b); r = tohex(q) .. " " .. tohex(m)
  elseif op == "small" then r = tohex(small(num(a)))
  end
  out[#out + 1] = r
end
return out
`

// TestBignum checks every bignum.lua operation against math/big on edge
// values (limb boundaries, powers of two around 2^24, 2^48, 2^53, 2^62,
// 2^63, 2^95) and on random operands of up to 128 bits.
func TestBignum(t *testing.T) {
	srv := redistest.Start(t)
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer c.Close()

	var edges []*big.Int
	for _, e := range []uint{0, 1, 23, 24, 25, 47, 48, 49, 52, 53, 54, 62, 63, 64, 94, 95, 96, 127} {
		p := new(big.Int).Lsh(big.NewInt(1), e)
		edges = append(edges, p, new(big.Int).Sub(p, big.NewInt(1)), new(big.Int).Add(p, big.NewInt(1)))
	}
	rng := rand.New(rand.NewPCG(7, 7))
	random := func() *big.Int {
		bitsN := rng.IntN(129)
		x := new(big.Int)
		for range (bitsN + 31) / 32 {
			x.Lsh(x, 32).Or(x, big.NewInt(int64(rng.Uint32())))
		}
		return x.Rsh(x, uint(((bitsN+31)/32)*32-bitsN))
	}
	type op struct {
		name string
		a, b *big.Int
	}
	var ops []op
	for _, a := range edges {
		for _, b := range edges {
			ops = append(ops, op{"add", a, b}, op{"mul", a, b}, op{"cmp", a, b}, op{"csub", a, b})
			if a.Cmp(b) >= 0 {
				ops = append(ops, op{"sub", a, b})
			}
			if b.Sign() > 0 {
				ops = append(ops, op{"divmod", a, b})
			}
		}
		if a.BitLen() <= 53 {
			ops = append(ops, op{"small", a, a})
		}
	}
	for range 3000 {
		a, b := random(), random()
		if rng.IntN(2) == 0 {
			b.Rsh(b, uint(rng.IntN(100))) // divisors of every size
		}
		ops = append(ops, op{"add", a, b}, op{"mul", a, b}, op{"cmp", a, b})
		if a.Cmp(b) < 0 {
			a, b = b, a
		}
		ops = append(ops, op{"sub", a, b})
		if b.Sign() > 0 {
			ops = append(ops, op{"divmod", a, b})
		}
	}

	script := goredis.NewScript(bignumLua + bignumCalc)
	for start := 0; start < len(ops); start += 500 {
		batch := ops[start:min(start+500, len(ops))]
		var args []any
		for _, o := range batch {
			args = append(args, o.name, o.a.Text(16), o.b.Text(16))
		}
		res, err := script.Run(context.Background(), c, nil, args...).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range batch {
			var want string
			switch o.name {
			case "add":
				want = new(big.Int).Add(o.a, o.b).Text(16)
			case "sub":
				want = new(big.Int).Sub(o.a, o.b).Text(16)
			case "csub":
				d := new(big.Int).Sub(o.a, o.b)
				if d.Sign() < 0 {
					d.SetInt64(0)
				}
				want = d.Text(16)
			case "mul":
				want = new(big.Int).Mul(o.a, o.b).Text(16)
			case "cmp":
				want = fmt.Sprint(o.a.Cmp(o.b))
			case "divmod":
				q, m := new(big.Int).QuoRem(o.a, o.b, new(big.Int))
				want = q.Text(16) + " " + m.Text(16)
			case "small":
				want = o.a.Text(16)
			}
			if res[i] != want {
				t.Errorf("%s(%s, %s) = %s, want %s", o.name, o.a.Text(16), o.b.Text(16), res[i], want)
			}
		}
	}
}

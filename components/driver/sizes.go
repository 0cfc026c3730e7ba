package driver

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Sizes is a distribution of network sizes (attachments per virtual
// network), parsed from --network-sizes:
//
//	N          every network has N attachments
//	uniform:A-B  sizes uniform in [A,B]
//	geometric:M  sizes geometric with mean M (at least 1): many small
//	             networks, a few large ones
//	zipf:S,MAX   sizes Zipf-distributed with exponent S > 1 in [1,MAX]
type Sizes struct {
	kind    string
	a, b    int
	mean, s float64
	spec    string
}

// ParseSizes parses a --network-sizes value.
func ParseSizes(spec string) (Sizes, error) {
	bad := func(err error) (Sizes, error) {
		return Sizes{}, fmt.Errorf("network sizes %q: %w (want N, uniform:A-B, geometric:MEAN or zipf:S,MAX)", spec, err)
	}
	kind, arg, found := strings.Cut(spec, ":")
	if !found {
		n, err := strconv.Atoi(spec)
		if err != nil || n < 1 {
			return bad(fmt.Errorf("not a positive size"))
		}
		return Sizes{kind: "fixed", a: n, b: n, spec: spec}, nil
	}
	switch kind {
	case "uniform":
		lo, hi, ok := strings.Cut(arg, "-")
		a, err1 := strconv.Atoi(lo)
		b, err2 := strconv.Atoi(hi)
		if !ok || err1 != nil || err2 != nil || a < 1 || b < a {
			return bad(fmt.Errorf("want 1 <= A <= B"))
		}
		return Sizes{kind: kind, a: a, b: b, spec: spec}, nil
	case "geometric":
		m, err := strconv.ParseFloat(arg, 64)
		if err != nil || m < 1 {
			return bad(fmt.Errorf("want a mean of at least 1"))
		}
		return Sizes{kind: kind, mean: m, spec: spec}, nil
	case "zipf":
		sStr, maxStr, ok := strings.Cut(arg, ",")
		s, err1 := strconv.ParseFloat(sStr, 64)
		mx, err2 := strconv.Atoi(maxStr)
		if !ok || err1 != nil || err2 != nil || s <= 1 || mx < 1 {
			return bad(fmt.Errorf("want S > 1 and MAX >= 1"))
		}
		return Sizes{kind: kind, s: s, b: mx, spec: spec}, nil
	}
	return bad(fmt.Errorf("unknown distribution %q", kind))
}

// String returns the spec the distribution was parsed from.
func (d Sizes) String() string { return d.spec }

// Max returns the largest size the distribution yields, or 0 when it has
// no bound (geometric).
func (d Sizes) Max() int {
	if d.kind == "geometric" {
		return 0
	}
	return d.b
}

// Sample draws one size, at least 1.
func (d Sizes) Sample(r *rand.Rand) int {
	switch d.kind {
	case "fixed":
		return d.a
	case "uniform":
		return d.a + r.IntN(d.b-d.a+1)
	case "geometric":
		if d.mean <= 1 {
			return 1
		}
		// Number of trials to the first success, success probability 1/mean.
		p := 1 / d.mean
		return 1 + int(math.Floor(math.Log(1-r.Float64())/math.Log(1-p)))
	case "zipf":
		return 1 + int(rand.NewZipf(r, d.s, 1, uint64(d.b-1)).Uint64())
	}
	return 1
}

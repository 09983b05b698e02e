package pack

import (
	"math"
)

// Float encoders and decoders for the dtypes pack reads and writes (F32, F16, BF16).
//
// Rounding rule everywhere: IEEE 754 round-to-nearest, ties-to-even, applied ONCE.
// A float64 fold result is rounded straight to the output format; going through a
// float32 first would round twice and can differ in the last bit. To round a float64 to
// a narrow format once we first round it to float32 with round-to-odd (sticky bit kept
// in the last mantissa bit), then round that float32 to nearest-even: float32 carries
// 24 significant bits, at least 2 more than bf16 (8) and f16 (11), which is what makes
// round-to-odd followed by round-to-nearest-even equal to a single rounding
// (Boldo & Melquiond, "When double rounding is odd", 2005).

// BF16FromF32 rounds a float32 to bf16 bits, round-to-nearest-even.
// NaN stays NaN: the sign and the top payload bits are kept and the quiet bit is set
// (so a NaN whose payload lives only in the low 16 bits does not become Inf).
// Values at or above the midpoint between the largest finite bf16 and 2^128 become Inf.
func BF16FromF32(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN
		return uint16(u>>16) | 0x0040
	}
	// Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even; a carry out
	// of the mantissa bumps the exponent, which is exactly right (up to Inf at the top).
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// F32FromBF16 widens bf16 bits to a float32 (exact).
func F32FromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F16FromF32 rounds a float32 to IEEE binary16 bits, round-to-nearest-even, with
// subnormals, overflow to Inf, and NaN kept NaN (quiet, sign and top payload kept).
func F16FromF32(f float32) uint16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	a := u & 0x7fffffff
	switch {
	case a > 0x7f800000: // NaN
		return sign | 0x7e00 | uint16(a>>13)&0x03ff
	case a >= 0x477ff000: // >= 65520 = midpoint of 65504 and 65536: Inf (also Inf itself)
		return sign | 0x7c00
	case a >= 0x38800000: // >= 2^-14: normal f16
		// Rebias the exponent (127 -> 15) and round off 13 mantissa bits.
		v := a - (112 << 23)
		v += 0x0fff + (v>>13)&1
		return sign | uint16(v>>13)
	case a < 0x33000000: // < 2^-25: rounds to zero (2^-25 itself is a tie to even = 0)
		return sign
	default: // f16 subnormal: value = m * 2^-24, m in [0, 1024]
		e := a >> 23                   // biased f32 exponent, 102..112
		m := a&0x007fffff | 0x00800000 // 24-bit significand, value = m * 2^(e-150)
		shift := 126 - e               // bits to drop so the unit is 2^-24: (e-150) - (-24)
		half := uint32(1) << (shift - 1)
		r := m >> shift
		rem := m & (1<<shift - 1)
		if rem > half || rem == half && r&1 == 1 {
			r++
		}
		return sign | uint16(r) // r == 1024 is the smallest normal, correctly encoded
	}
}

// F32FromF16 widens IEEE binary16 bits to a float32 (exact; NaN payload kept).
func F32FromF16(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x03ff)
	switch {
	case exp == 0x1f: // Inf / NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	// subnormal: man * 2^-24; normalize.
	e := uint32(113) // biased f32 exponent of 2^-14, decremented while shifting
	for man&0x0400 == 0 {
		man <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (man&0x03ff)<<13)
}

// f32RoundToOdd rounds a float64 to float32 with round-to-odd: when x is not exactly
// representable the result is whichever float32 neighbour has an odd last mantissa bit.
// Overflow gives ±MaxFloat32 (odd), so a later nearest-even rounding still overflows
// exactly when a single rounding would. NaN and Inf pass through.
func f32RoundToOdd(x float64) float32 {
	f := float32(x) // round-to-nearest-even
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return f
	}
	if float64(f) == x {
		return f
	}
	u := math.Float32bits(f)
	if u&1 == 1 { // already odd (Inf is even, so f is finite here)
		return f
	}
	// f is even and inexact: step to the odd neighbour that lies toward x.
	// |f| moved away from x when |f| > |x|, so step the magnitude down, else up.
	if math.Abs(float64(f)) > math.Abs(x) {
		u-- // magnitude down (f != 0 here, since |f| > |x| >= 0); Inf-1 = MaxFloat32
	} else {
		u++
	}
	return math.Float32frombits(u)
}

// BF16FromF64 rounds a float64 to bf16 bits once, to nearest-even.
func BF16FromF64(x float64) uint16 { return BF16FromF32(f32RoundToOdd(x)) }

// F16FromF64 rounds a float64 to binary16 bits once, to nearest-even.
func F16FromF64(x float64) uint16 { return F16FromF32(f32RoundToOdd(x)) }

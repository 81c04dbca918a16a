package nexar

import (
	"math"
	"strconv"
)

// Float16 is an IEEE 754 binary16 number (NEXAR_DTYPE_F16), held as its
// bits: 1 sign, 5 exponent and 10 fraction bits. Convert with
// Float16FromFloat32 and Float32; Float16(1) is the bit pattern 0x0001 (the
// smallest subnormal), not 1.0. Go arithmetic on a Float16 is arithmetic on
// its bits; reduce with nexar (AllReduce, ...) or convert first.
type Float16 uint16

// BFloat16 is a bfloat16 number (NEXAR_DTYPE_BF16), held as its bits: the
// top half of a float32 (1 sign, 8 exponent and 7 fraction bits). Convert
// with BFloat16FromFloat32 and Float32; as for Float16, BFloat16(1) is a bit
// pattern, not 1.0.
type BFloat16 uint16

// Float16FromFloat32 rounds f to the nearest Float16, ties to even. Values
// from 65520 up (halfway between the largest finite Float16, 65504, and
// 2^16) become ±Inf; values below 2^-14 become subnormals, and those of at
// most 2^-25 become ±0. A NaN stays a NaN: quiet, with the top bits of its
// payload and its sign (as nexar's kernels and x86's VCVTPS2PH do).
func Float16FromFloat32(f float32) Float16 {
	u := math.Float32bits(f)
	sign := uint16(u>>16) & 0x8000
	a := u & 0x7fffffff
	switch {
	case a > 0x7f800000: // NaN
		return Float16(sign | 0x7e00 | uint16(a>>13)&0x3ff)
	case a >= 0x477ff000: // >= 65520, Inf included
		return Float16(sign | 0x7c00)
	case a >= 0x38800000: // a normal Float16 (>= 2^-14)
		// Rebias the exponent and round the 13 dropped bits to nearest even;
		// a carry out of the fraction correctly bumps the exponent.
		r := a - (127-15)<<23 + 0xfff + (a>>13)&1
		return Float16(sign | uint16(r>>13))
	}
	// A subnormal Float16 or zero: m = round(|f| / 2^-24), which may carry
	// into the smallest normal. Below 2^-25 (float32 exponent < 102) it is 0.
	e := a >> 23
	if e < 102 {
		return Float16(sign)
	}
	mant := a&0x7fffff | 0x800000
	shift := 126 - e // 14..24
	m := mant >> shift
	rem := mant & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rem > half || rem == half && m&1 != 0 {
		m++
	}
	return Float16(sign | uint16(m))
}

// Float32 returns h as a float32, exactly (every Float16 is a float32). A
// NaN stays a NaN with its payload, made quiet.
func (h Float16) Float32() float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch exp {
	case 0: // zero or subnormal: mant × 2^-24, a normal float32 unless 0
		return math.Float32frombits(math.Float32bits(float32(mant)*0x1p-24) | sign)
	case 0x1f: // Inf or NaN
		bits := sign | 0x7f800000 | mant<<13
		if mant != 0 {
			bits |= 0x00400000
		}
		return math.Float32frombits(bits)
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// String formats h's value (not its bits) like a float32: "1", "-2.5",
// "+Inf", "NaN". Print uint16(h) for the bits.
func (h Float16) String() string {
	return strconv.FormatFloat(float64(h.Float32()), 'g', -1, 32)
}

// BFloat16FromFloat32 rounds f to the nearest BFloat16, ties to even.
// BFloat16 has float32's exponent range, so only values past its largest
// finite one (about 3.39e38) round to ±Inf, and float32 subnormals round
// like any other value. A NaN stays a NaN: quiet, with the top bits of its
// payload and its sign.
func BFloat16FromFloat32(f float32) BFloat16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN
		return BFloat16(u>>16 | 0x40)
	}
	return BFloat16((u + 0x7fff + (u>>16)&1) >> 16)
}

// Float32 returns b as a float32, exactly (its bits are a float32's top
// half).
func (b BFloat16) Float32() float32 {
	return math.Float32frombits(uint32(b) << 16)
}

// String formats b's value (not its bits) like a float32: "1", "-2.5",
// "+Inf", "NaN". Print uint16(b) for the bits.
func (b BFloat16) String() string {
	return strconv.FormatFloat(float64(b.Float32()), 'g', -1, 32)
}

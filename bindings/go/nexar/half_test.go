package nexar_test

import (
	"math"
	"testing"

	"github.com/nexar-project/nexar/bindings/go/nexar"
)

// f32 is the float32 with these bits.
func f32(bits uint32) float32 { return math.Float32frombits(bits) }

func TestFloat16FromFloat32(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   float32
		want uint16
	}{
		{"1", 1, 0x3c00},
		{"-2", -2, 0xc000},
		{"0.5", 0.5, 0x3800},
		{"+0", 0, 0x0000},
		{"-0", float32(math.Copysign(0, -1)), 0x8000},
		{"0.1 (rounded)", 0.1, 0x2e66},
		{"largest finite", 65504, 0x7bff},
		{"-largest finite", -65504, 0xfbff},
		{"65519 rounds down to 65504", 65519, 0x7bff},
		{"65520 rounds to Inf", 65520, 0x7c00},
		{"-65520 rounds to -Inf", -65520, 0xfc00},
		{"1e10 overflows", 1e10, 0x7c00},
		{"float32 max overflows", math.MaxFloat32, 0x7c00},
		{"+Inf", float32(math.Inf(1)), 0x7c00},
		{"-Inf", float32(math.Inf(-1)), 0xfc00},
		{"smallest normal 2^-14", 0x1p-14, 0x0400},
		{"largest subnormal", 1023 * 0x1p-24, 0x03ff},
		{"smallest subnormal 2^-24", 0x1p-24, 0x0001},
		{"-smallest subnormal", -0x1p-24, 0x8001},
		// Round to nearest, ties to even.
		{"1+2^-11: tie, down to even", 1 + 0x1p-11, 0x3c00},
		{"1+3×2^-11: tie, up to even", 1 + 3*0x1p-11, 0x3c02},
		{"1+2^-11+2^-20: above the tie", 1 + 0x1p-11 + 0x1p-20, 0x3c01},
		{"2049: tie, down to 2048", 2049, 0x6800},
		{"2051: tie, up to 2052", 2051, 0x6802},
		{"2047.5 carries into the exponent", 2047.5, 0x6800},
		{"2^-25: tie, down to 0", 0x1p-25, 0x0000},
		{"just above 2^-25", f32(0x33000001), 0x0001},
		{"float32 smallest subnormal", f32(0x00000001), 0x0000},
		{"1.5×2^-24: tie, up to 2", 1.5 * 0x1p-24, 0x0002},
		{"2.5×2^-24: tie, down to 2", 2.5 * 0x1p-24, 0x0002},
		{"1023.5×2^-24: tie, up to the smallest normal", 1023.5 * 0x1p-24, 0x0400},
		// NaN stays NaN, quiet, sign and top payload bits kept.
		{"quiet NaN", f32(0x7fc00000), 0x7e00},
		{"-quiet NaN", f32(0xffc00000), 0xfe00},
		{"signalling NaN with a low payload", f32(0x7f800001), 0x7e00},
		{"NaN with a high payload", f32(0x7fa02000), 0x7f01},
	} {
		if got := nexar.Float16FromFloat32(tc.in); uint16(got) != tc.want {
			t.Errorf("Float16FromFloat32(%s = %g) = %#04x, want %#04x", tc.name, tc.in, uint16(got), tc.want)
		}
	}
}

func TestFloat16Float32(t *testing.T) {
	for _, tc := range []struct {
		in   uint16
		want uint32 // float32 bits
	}{
		{0x3c00, 0x3f800000},                       // 1
		{0xc000, 0xc0000000},                       // -2
		{0x0000, 0x00000000},                       // +0
		{0x8000, 0x80000000},                       // -0
		{0x7bff, math.Float32bits(65504)},          // largest finite
		{0x0400, math.Float32bits(0x1p-14)},        // smallest normal
		{0x03ff, math.Float32bits(1023 * 0x1p-24)}, // largest subnormal
		{0x0001, math.Float32bits(0x1p-24)},        // smallest subnormal
		{0x8001, math.Float32bits(-0x1p-24)},
		{0x3555, math.Float32bits(0.333251953125)},
		{0x7c00, 0x7f800000}, // +Inf
		{0xfc00, 0xff800000}, // -Inf
		{0x7e00, 0x7fc00000}, // quiet NaN
		{0xfe00, 0xffc00000},
		{0x7c01, 0x7fc02000}, // signalling NaN: made quiet, payload kept
		{0x7f01, 0x7fe02000},
	} {
		if got := nexar.Float16(tc.in).Float32(); math.Float32bits(got) != tc.want {
			t.Errorf("Float16(%#04x).Float32() = %g (%#08x), want %g (%#08x)",
				tc.in, got, math.Float32bits(got), f32(tc.want), tc.want)
		}
	}
}

func TestBFloat16FromFloat32(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   float32
		want uint16
	}{
		{"1", 1, 0x3f80},
		{"-2", -2, 0xc000},
		{"3", 3, 0x4040},
		{"0.5", 0.5, 0x3f00},
		{"+0", 0, 0x0000},
		{"-0", float32(math.Copysign(0, -1)), 0x8000},
		{"0.1 (rounded)", 0.1, 0x3dcd},
		{"65504 is past bfloat16's 8 bits: 65536", 65504, 0x4780},
		{"1e10 is finite", 1e10, 0x5015},
		{"largest finite", f32(0x7f7f0000), 0x7f7f},
		{"float32 max overflows", math.MaxFloat32, 0x7f80},
		{"-float32 max overflows", -math.MaxFloat32, 0xff80},
		{"+Inf", float32(math.Inf(1)), 0x7f80},
		{"-Inf", float32(math.Inf(-1)), 0xff80},
		{"float32 smallest normal", f32(0x00800000), 0x0080},
		{"a float32 subnormal", f32(0x00010000), 0x0001},
		{"float32 smallest subnormal rounds to 0", f32(0x00000001), 0x0000},
		// Round to nearest, ties to even.
		{"257: tie, down to 256", 257, 0x4380},
		{"259: tie, up to 260", 259, 0x4382},
		{"257.5: above the tie", 257.5, 0x4381},
		{"1+2^-8: tie, down to 1", 1 + 0x1p-8, 0x3f80},
		{"1+3×2^-8: tie, up to even", 1 + 3*0x1p-8, 0x3f82},
		{"255.5 carries into the exponent", 255.5, 0x4380},
		// NaN stays NaN (plain truncation would make 0x7f800001 Inf).
		{"quiet NaN", f32(0x7fc00000), 0x7fc0},
		{"-quiet NaN", f32(0xffc00000), 0xffc0},
		{"signalling NaN with a low payload", f32(0x7f800001), 0x7fc0},
		{"NaN with a high payload", f32(0x7fa10000), 0x7fe1},
	} {
		if got := nexar.BFloat16FromFloat32(tc.in); uint16(got) != tc.want {
			t.Errorf("BFloat16FromFloat32(%s = %g) = %#04x, want %#04x", tc.name, tc.in, uint16(got), tc.want)
		}
	}
}

func TestBFloat16Float32(t *testing.T) {
	for _, tc := range []struct {
		in   uint16
		want float32
	}{
		{0x3f80, 1}, {0xc000, -2}, {0x4040, 3}, {0x3f00, 0.5}, {0x4380, 256},
		{0x0001, f32(0x00010000)}, {0x7f7f, f32(0x7f7f0000)},
		{0x7f80, float32(math.Inf(1))}, {0xff80, float32(math.Inf(-1))},
	} {
		if got := nexar.BFloat16(tc.in).Float32(); got != tc.want {
			t.Errorf("BFloat16(%#04x).Float32() = %g, want %g", tc.in, got, tc.want)
		}
	}
	if got := nexar.BFloat16(0x7fc1).Float32(); math.Float32bits(got) != 0x7fc10000 {
		t.Errorf("BFloat16(0x7fc1).Float32() = %#08x, want the NaN 0x7fc10000", math.Float32bits(got))
	}
}

// Every finite or infinite half value converts to float32 and back to
// itself; every NaN stays a NaN.
func TestHalfRoundTripEveryValue(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := nexar.Float16(i)
		f := h.Float32()
		back := nexar.Float16FromFloat32(f)
		isNaN := i&0x7c00 == 0x7c00 && i&0x3ff != 0
		if isNaN != (f != f) {
			t.Fatalf("Float16(%#04x).Float32() = %g", i, f)
		}
		if isNaN && (back&0x7c00 != 0x7c00 || back&0x3ff == 0) {
			t.Fatalf("Float16 NaN %#04x came back as %#04x", i, uint16(back))
		}
		if !isNaN && back != h {
			t.Fatalf("Float16(%#04x) -> %g -> %#04x", i, f, uint16(back))
		}

		b := nexar.BFloat16(i)
		g := b.Float32()
		bBack := nexar.BFloat16FromFloat32(g)
		isNaN = i&0x7f80 == 0x7f80 && i&0x7f != 0
		if isNaN != (g != g) {
			t.Fatalf("BFloat16(%#04x).Float32() = %g", i, g)
		}
		if isNaN && (bBack&0x7f80 != 0x7f80 || bBack&0x7f == 0) {
			t.Fatalf("BFloat16 NaN %#04x came back as %#04x", i, uint16(bBack))
		}
		if !isNaN && bBack != b {
			t.Fatalf("BFloat16(%#04x) -> %g -> %#04x", i, g, uint16(bBack))
		}
	}
}

// Float16FromFloat32 picks the nearest Float16 (ties to the even one, and
// past 65504 + half a step Inf) for float32 values spread over the whole
// range, checked in float64, where every difference is exact.
func TestFloat16FromFloat32Nearest(t *testing.T) {
	const step = 4099 // a prime: the samples' low bits vary
	for u := uint64(0); u < 0x7f800000; u += step {
		x := float64(f32(uint32(u)))
		got := nexar.Float16FromFloat32(float32(x))
		if x >= 65520 {
			if got != 0x7c00 {
				t.Fatalf("%g: got %#04x, want Inf", x, uint16(got))
			}
			continue
		}
		if got >= 0x7c00 {
			t.Fatalf("%g: got %#04x, want a finite value", x, uint16(got))
		}
		d := math.Abs(x - float64(got.Float32()))
		for _, n := range []nexar.Float16{got - 1, got + 1} {
			if n >= 0x7c00 { // past the largest finite value (or below 0, wrapped)
				continue
			}
			dn := math.Abs(x - float64(n.Float32()))
			if dn < d || dn == d && n&1 == 0 {
				t.Fatalf("%g: got %#04x (%g), but %#04x (%g) is nearer or the even one of a tie",
					x, uint16(got), got.Float32(), uint16(n), n.Float32())
			}
		}
		if neg := nexar.Float16FromFloat32(float32(-x)); neg != got|0x8000 {
			t.Fatalf("%g: got %#04x, but -%g gives %#04x", x, uint16(got), x, uint16(neg))
		}
	}
}

// String shows the value, not the bits.
func TestHalfString(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{nexar.Float16(0x3c00).String(), "1"},
		{nexar.Float16FromFloat32(-2.5).String(), "-2.5"},
		{nexar.Float16(0x7c00).String(), "+Inf"},
		{nexar.Float16(0x7e00).String(), "NaN"},
		{nexar.BFloat16(0x3f80).String(), "1"},
		{nexar.BFloat16FromFloat32(-2.5).String(), "-2.5"},
		{nexar.BFloat16(0xff80).String(), "-Inf"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// Each element type's NEXAR_DTYPE_* (include/nexar.h): the half types by
// their own type, although uint16 is underneath both, the others by kind.
func TestDtypeOf(t *testing.T) {
	for _, tc := range []struct {
		name      string
		got, want int32
	}{
		{"float32", nexar.DtypeOf[float32](), 0},
		{"float64", nexar.DtypeOf[float64](), 1},
		{"Float16", nexar.DtypeOf[nexar.Float16](), 2},
		{"BFloat16", nexar.DtypeOf[nexar.BFloat16](), 3},
		{"int8", nexar.DtypeOf[int8](), 4},
		{"int32", nexar.DtypeOf[int32](), 5},
		{"int64", nexar.DtypeOf[int64](), 6},
		{"uint8", nexar.DtypeOf[uint8](), 7},
		{"byte", nexar.DtypeOf[byte](), 7},
		{"uint32", nexar.DtypeOf[uint32](), 8},
		{"uint64", nexar.DtypeOf[uint64](), 9},
		{"celsius", nexar.DtypeOf[celsius](), 0},
	} {
		if tc.got != tc.want {
			t.Errorf("DtypeOf[%s]() = %d, want %d", tc.name, tc.got, tc.want)
		}
	}
}

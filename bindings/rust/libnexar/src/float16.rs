//! The C ABI's half-precision element types: [`F16`] (IEEE 754 binary16) and
//! [`Bf16`] (bfloat16), as newtypes over their bits.
//!
//! The conversions from `f32` round as nexar's reduction kernels do
//! (`src/core/reduce.cpp`): to nearest, ties to even; a NaN stays a (quiet)
//! NaN. So `F16::from_f32(a.to_f32() + b.to_f32())` is the sum `Op::Sum`
//! gives for two ranks.

use std::cmp::Ordering;
use std::fmt;

/// An IEEE 754 binary16 number (`NEXAR_DTYPE_F16`): 1 sign bit, 5 exponent
/// bits, 10 mantissa bits; largest finite value 65504, smallest subnormal
/// 2<sup>-24</sup>.
///
/// A plain `u16` of bits underneath (`#[repr(transparent)]`), so a
/// `&mut [F16]` is what nexar reads and writes as f16 in every collective and
/// point-to-point call. Arithmetic is not provided: convert with
/// [`to_f32`](F16::to_f32) / [`from_f32`](F16::from_f32) (or `f32::from`,
/// `F16::from`). nexar itself reduces f16 by widening to f32 and rounding the
/// result once.
///
/// Comparisons are IEEE ones, like `f32`'s: `NaN != NaN`, `-0.0 == 0.0`;
/// compare [`to_bits`](F16::to_bits) for identity. `Debug` and `Display`
/// print the value.
///
/// With the [`half`](https://docs.rs/half) crate (not a dependency of this
/// one) the bits are the same: `half::f16::from_bits(x.to_bits())` and
/// `F16::from_bits(h.to_bits())` convert exactly, without rounding; a slice
/// converts with `.iter().map(..).collect()` in the same way.
///
/// ```
/// use libnexar::F16;
///
/// let x = F16::from_f32(1.0);
/// assert_eq!(x.to_bits(), 0x3c00);
/// assert_eq!(f32::from(F16::from_bits(0xc000)), -2.0);
/// assert_eq!(F16::from(65504.0f32), F16::MAX);
/// assert_eq!(F16::from_f32(1.0e6), F16::INFINITY); // too large for f16
/// ```
#[derive(Clone, Copy, Default)]
#[repr(transparent)]
pub struct F16(u16);

/// A bfloat16 number (`NEXAR_DTYPE_BF16`): the top 16 bits of an `f32` (1
/// sign bit, 8 exponent bits, 7 mantissa bits), so the range of `f32` with
/// about 3 significant decimal digits.
///
/// A plain `u16` of bits underneath (`#[repr(transparent)]`), so a
/// `&mut [Bf16]` is what nexar reads and writes as bf16 in every collective
/// and point-to-point call. Arithmetic is not provided: convert with
/// [`to_f32`](Bf16::to_f32) (exact) / [`from_f32`](Bf16::from_f32) (rounded
/// to nearest even), or `f32::from`, `Bf16::from`. nexar itself reduces bf16
/// by widening to f32 and rounding the result once.
///
/// Comparisons are IEEE ones, like `f32`'s: `NaN != NaN`, `-0.0 == 0.0`;
/// compare [`to_bits`](Bf16::to_bits) for identity. `Debug` and `Display`
/// print the value.
///
/// With the [`half`](https://docs.rs/half) crate (not a dependency of this
/// one) the bits are the same: `half::bf16::from_bits(x.to_bits())` and
/// `Bf16::from_bits(h.to_bits())` convert exactly, without rounding; a slice
/// converts with `.iter().map(..).collect()` in the same way.
///
/// ```
/// use libnexar::Bf16;
///
/// let x = Bf16::from_f32(1.0);
/// assert_eq!(x.to_bits(), 0x3f80);
/// assert_eq!(f32::from(Bf16::from_bits(0xc000)), -2.0);
/// assert_eq!(Bf16::from(257.0f32).to_f32(), 256.0); // a tie: to the even neighbour
/// ```
#[derive(Clone, Copy, Default)]
#[repr(transparent)]
pub struct Bf16(u16);

/// What both types share: bits, constants from bits, IEEE comparisons through
/// f32 (exact for both), formatting of the value, `From` conversions.
macro_rules! half_type {
    ($t:ident, $zero:expr, $one:expr, $inf:expr, $nan:expr, $max:expr) => {
        impl $t {
            /// 0.0
            pub const ZERO: $t = $t($zero);
            /// 1.0
            pub const ONE: $t = $t($one);
            /// Positive infinity.
            pub const INFINITY: $t = $t($inf);
            /// Negative infinity.
            pub const NEG_INFINITY: $t = $t($inf | 0x8000);
            /// A quiet NaN (the one nexar's conversions make from a NaN
            /// without payload).
            pub const NAN: $t = $t($nan);
            /// The largest finite value.
            pub const MAX: $t = $t($max);
            /// The smallest (most negative) finite value.
            pub const MIN: $t = $t($max | 0x8000);

            /// The number with these bits.
            pub const fn from_bits(bits: u16) -> $t {
                $t(bits)
            }

            /// The bits of this number, as nexar reads them.
            pub const fn to_bits(self) -> u16 {
                self.0
            }

            /// True for every NaN (any payload, either sign).
            pub fn is_nan(self) -> bool {
                (self.0 & 0x7fff) > $inf
            }
        }

        impl PartialEq for $t {
            fn eq(&self, other: &$t) -> bool {
                self.to_f32() == other.to_f32()
            }
        }

        impl PartialOrd for $t {
            fn partial_cmp(&self, other: &$t) -> Option<Ordering> {
                self.to_f32().partial_cmp(&other.to_f32())
            }
        }

        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.to_f32(), f)
            }
        }

        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.to_f32(), f)
            }
        }

        impl From<f32> for $t {
            #[doc = concat!("[`", stringify!($t), "::from_f32`]: rounded to nearest even.")]
            fn from(x: f32) -> $t {
                $t::from_f32(x)
            }
        }

        impl From<$t> for f32 {
            #[doc = concat!("[`", stringify!($t), "::to_f32`]: exact.")]
            fn from(x: $t) -> f32 {
                x.to_f32()
            }
        }
    };
}

half_type!(F16, 0x0000, 0x3c00, 0x7c00, 0x7e00, 0x7bff);
half_type!(Bf16, 0x0000, 0x3f80, 0x7f80, 0x7fc0, 0x7f7f);

impl F16 {
    /// The f16 nearest to `x`, ties to even (what x86's F16C and nexar do):
    /// magnitudes from 65520 up become infinity; below 2<sup>-14</sup>,
    /// subnormals (at 2<sup>-25</sup> and below, zero); a NaN stays a quiet
    /// NaN (its payload's top bits kept).
    pub fn from_f32(x: f32) -> F16 {
        let u = x.to_bits();
        let sign = ((u >> 16) & 0x8000) as u16;
        let a = u & 0x7fff_ffff;
        if a > 0x7f80_0000 {
            // NaN: quiet, payload truncated to its top bits.
            return F16(sign | 0x7e00 | ((a >> 13) & 0x3ff) as u16);
        }
        if a >= 0x477f_f000 {
            // >= 65520, halfway between 65504 and 2^16: infinity.
            return F16(sign | 0x7c00);
        }
        if a >= 0x3880_0000 {
            // Normal (>= 2^-14): rebias the exponent and round the 13 dropped
            // bits to nearest even; a carry out of the mantissa bumps the
            // exponent, as it should.
            let r = (a - ((127 - 15) << 23)) + 0xfff + ((a >> 13) & 1);
            return F16(sign | (r >> 13) as u16);
        }
        // Subnormal or zero: round(|x| / 2^-24), ties to even; below 2^-25
        // (f32 exponent < 102) that is 0.
        let e = a >> 23;
        if e < 102 {
            return F16(sign);
        }
        let mant = (a & 0x007f_ffff) | 0x0080_0000;
        let shift = 126 - e; // 14..=24
        let mut m = mant >> shift;
        let rem = mant & ((1 << shift) - 1);
        let half = 1 << (shift - 1);
        if rem > half || (rem == half && m & 1 == 1) {
            m += 1; // may carry into the smallest normal, correctly
        }
        F16(sign | m as u16)
    }

    /// The exact `f32` of this number (a NaN comes out quiet, its payload kept).
    pub fn to_f32(self) -> f32 {
        let h = u32::from(self.0);
        let sign = (h & 0x8000) << 16;
        let exp = (h >> 10) & 0x1f;
        let mant = h & 0x3ff;
        let bits = if exp == 0 {
            // Zero or subnormal: mant * 2^-24, exact in f32.
            (mant as f32 * f32::from_bits(0x3380_0000)).to_bits() | sign
        } else if exp == 0x1f {
            // Infinity, or NaN made quiet.
            let quiet = if mant != 0 { 0x0040_0000 } else { 0 };
            sign | 0x7f80_0000 | (mant << 13) | quiet
        } else {
            sign | ((exp + (127 - 15)) << 23) | (mant << 13)
        };
        f32::from_bits(bits)
    }
}

impl Bf16 {
    /// The bf16 nearest to `x` (its top 16 bits, rounded to nearest even):
    /// values beyond the largest bf16 by half a step or more become
    /// infinity; a NaN stays a NaN, made quiet.
    pub fn from_f32(x: f32) -> Bf16 {
        let u = x.to_bits();
        if (u & 0x7fff_ffff) > 0x7f80_0000 {
            return Bf16(((u >> 16) | 0x40) as u16);
        }
        Bf16(((u + 0x7fff + ((u >> 16) & 1)) >> 16) as u16)
    }

    /// The exact `f32` of this number.
    pub fn to_f32(self) -> f32 {
        f32::from_bits(u32::from(self.0) << 16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f16(x: f32) -> u16 {
        F16::from_f32(x).to_bits()
    }

    fn bf16(x: f32) -> u16 {
        Bf16::from_f32(x).to_bits()
    }

    /// 2^e as an f32 (e within the normal range).
    fn pow2(e: i32) -> f32 {
        f32::from_bits(((127 + e) as u32) << 23)
    }

    #[test]
    fn f16_known_bit_patterns() {
        let cases: [(f32, u16); 14] = [
            (0.0, 0x0000),
            (-0.0, 0x8000),
            (1.0, 0x3c00),
            (-2.0, 0xc000),
            (0.5, 0x3800),
            (-1.25, 0xbd00),
            (1024.0, 0x6400),
            (65504.0, 0x7bff),            // the largest finite f16
            (pow2(-14), 0x0400),          // the smallest normal
            (pow2(-24), 0x0001),          // the smallest subnormal
            (1023.0 * pow2(-24), 0x03ff), // the largest subnormal
            (-pow2(-24), 0x8001),
            (f32::INFINITY, 0x7c00),
            (f32::NEG_INFINITY, 0xfc00),
        ];
        for (x, bits) in cases {
            assert_eq!(f16(x), bits, "{} -> f16", x);
            assert_eq!(
                F16::from_bits(bits).to_f32().to_bits(),
                x.to_bits(),
                "{:#06x}",
                bits
            );
        }
        assert_eq!(F16::ONE.to_bits(), 0x3c00);
        assert_eq!(F16::MAX.to_f32(), 65504.0);
        assert_eq!(F16::MIN.to_f32(), -65504.0);
        assert_eq!(F16::default().to_bits(), 0);
    }

    #[test]
    fn bf16_known_bit_patterns() {
        let cases: [(f32, u16); 11] = [
            (0.0, 0x0000),
            (-0.0, 0x8000),
            (1.0, 0x3f80),
            (-2.0, 0xc000),
            (0.5, 0x3f00),
            (-1.25, 0xbfa0),
            (256.0, 0x4380),
            (3.389_531_4e38, 0x7f7f),              // the largest finite bf16
            (f32::from_bits(0x0001_0000), 0x0001), // the smallest subnormal
            (f32::INFINITY, 0x7f80),
            (f32::NEG_INFINITY, 0xff80),
        ];
        for (x, bits) in cases {
            assert_eq!(bf16(x), bits, "{} -> bf16", x);
            assert_eq!(
                Bf16::from_bits(bits).to_f32().to_bits(),
                x.to_bits(),
                "{:#06x}",
                bits
            );
        }
        assert_eq!(Bf16::ONE.to_bits(), 0x3f80);
        assert_eq!(Bf16::MAX.to_f32(), 3.389_531_4e38);
        assert_eq!(Bf16::default().to_bits(), 0);
    }

    #[test]
    fn f16_rounds_to_nearest_even() {
        let ulp = pow2(-10); // f16's step between 1 and 2
        assert_eq!(
            f16(1.0 + ulp / 2.0),
            0x3c00,
            "tie between 1 and 1+ulp: even 1"
        );
        assert_eq!(
            f16(1.0 + 1.5 * ulp),
            0x3c02,
            "tie between odd and even: even"
        );
        assert_eq!(f16(1.0 + 0.75 * ulp), 0x3c01, "above the tie: up");
        assert_eq!(f16(1.0 + 0.25 * ulp), 0x3c00, "below the tie: down");
        assert_eq!(f16(2049.0), 0x6800, "2049 is a tie: 2048");
        assert_eq!(f16(2051.0), 0x6802, "2051 is a tie: 2052");
        assert_eq!(f16(-2051.0), 0xe802);
        assert_eq!(f16(65519.0), 0x7bff, "below the tie with 65536: 65504");
        assert_eq!(f16(65520.0), 0x7c00, "the tie with 65536: infinity");
        assert_eq!(f16(-1.0e9), 0xfc00, "overflow: -infinity");
        assert_eq!(f16(f32::MAX), 0x7c00);
        // Subnormals.
        assert_eq!(
            f16(pow2(-25)),
            0x0000,
            "half the smallest subnormal is a tie: 0"
        );
        assert_eq!(f16(1.5 * pow2(-24)), 0x0002, "tie between 1 and 2 steps: 2");
        assert_eq!(f16(2.5 * pow2(-24)), 0x0002, "tie between 2 and 3 steps: 2");
        assert_eq!(f16(1.0001 * pow2(-25)), 0x0001, "above the tie: up");
        assert_eq!(f16(pow2(-26)), 0x0000);
        assert_eq!(f16(-pow2(-26)), 0x8000, "the sign survives underflow");
        assert_eq!(f16(f32::from_bits(1)), 0x0000);
        assert_eq!(
            f16(1023.5 * pow2(-24)),
            0x0400,
            "carries into the smallest normal"
        );
        // A carry out of the mantissa bumps the exponent.
        assert_eq!(f16(2.0 - ulp / 4.0), 0x4000);
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(bf16(257.0), 0x4380, "257 is a tie: 256");
        assert_eq!(bf16(259.0), 0x4382, "259 is a tie: 260");
        assert_eq!(bf16(257.5), 0x4381, "above the tie: up");
        assert_eq!(bf16(-259.0), 0xc382);
        assert_eq!(
            bf16(f32::from_bits(0x3f80_7fff)),
            0x3f80,
            "below the tie: down"
        );
        assert_eq!(
            bf16(f32::from_bits(0x3fff_ffff)),
            0x4000,
            "a carry bumps the exponent"
        );
        assert_eq!(
            bf16(f32::MAX),
            0x7f80,
            "beyond the largest bf16 by half a step: infinity"
        );
        assert_eq!(bf16(f32::from_bits(0x7f7f_7fff)), 0x7f7f);
        assert_eq!(
            bf16(f32::from_bits(0x0000_8000)),
            0x0000,
            "a subnormal tie: even"
        );
        assert_eq!(bf16(f32::from_bits(0x0001_8000)), 0x0002);
    }

    #[test]
    fn nan_stays_nan() {
        let nans = [
            f32::NAN,
            -f32::NAN,
            f32::from_bits(0x7f80_0001), // signalling, lowest payload bit only
            f32::from_bits(0xffbf_ffff), // signalling, negative
            f32::from_bits(0x7fc0_2000),
        ];
        for x in nans {
            let h = F16::from_f32(x);
            assert!(h.is_nan(), "{:#x} -> f16 {:#06x}", x.to_bits(), h.to_bits());
            assert!(h.to_f32().is_nan());
            assert_eq!(h.to_bits() & 0x0200, 0x0200, "quiet");
            assert_eq!(
                h.to_bits() & 0x8000,
                ((x.to_bits() >> 16) & 0x8000) as u16,
                "sign"
            );
            let b = Bf16::from_f32(x);
            assert!(
                b.is_nan(),
                "{:#x} -> bf16 {:#06x}",
                x.to_bits(),
                b.to_bits()
            );
            assert!(b.to_f32().is_nan());
            assert_eq!(b.to_bits() & 0x0040, 0x0040, "quiet");
        }
        assert_eq!(f16(f32::NAN), F16::NAN.to_bits());
        assert_eq!(bf16(f32::NAN), Bf16::NAN.to_bits());
        // Every NaN bit pattern widens to a NaN; infinities are not NaN.
        assert!(F16::from_bits(0x7c01).to_f32().is_nan());
        assert!(F16::from_bits(0xfe00).is_nan());
        assert!(Bf16::from_bits(0x7f81).to_f32().is_nan());
        assert!(!F16::INFINITY.is_nan() && !Bf16::NEG_INFINITY.is_nan());
        assert!(F16::INFINITY.to_f32().is_infinite());
    }

    #[test]
    fn every_value_converts_back_to_its_bits() {
        for bits in 0..=u16::MAX {
            let h = F16::from_bits(bits);
            let b = Bf16::from_bits(bits);
            if h.is_nan() {
                assert!(h.to_f32().is_nan());
            } else {
                assert_eq!(
                    F16::from_f32(h.to_f32()).to_bits(),
                    bits,
                    "f16 {:#06x}",
                    bits
                );
            }
            if b.is_nan() {
                assert!(b.to_f32().is_nan());
            } else {
                assert_eq!(
                    Bf16::from_f32(b.to_f32()).to_bits(),
                    bits,
                    "bf16 {:#06x}",
                    bits
                );
            }
        }
    }

    /// The representable neighbour of `x` that is nearest, ties to the even
    /// bits, found by searching rather than bit tricks: `to` is exact.
    fn nearest(x: f32, to: impl Fn(u16) -> f32, finite_max: u16, inf: u16) -> u16 {
        let sign: u16 = if x.is_sign_negative() { 0x8000 } else { 0 };
        let a = f64::from(x.abs());
        let max = f64::from(to(finite_max));
        // Beyond the largest finite value by half its step or more: infinity.
        let step = max - f64::from(to(finite_max - 1));
        if a >= max + step / 2.0 {
            return sign | inf;
        }
        // Magnitudes are ordered like their bits: binary search for the
        // largest not above a.
        let (mut lo, mut hi) = (0u16, finite_max);
        while lo < hi {
            let mid = lo + (hi - lo + 1) / 2;
            if f64::from(to(mid)) <= a {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        let below = lo;
        if f64::from(to(below)) == a || below == finite_max {
            return sign | below;
        }
        let above = below + 1;
        let (db, da) = (a - f64::from(to(below)), f64::from(to(above)) - a);
        let pick = if db < da || (db == da && below & 1 == 0) {
            below
        } else {
            above
        };
        sign | pick
    }

    #[test]
    fn from_f32_is_the_nearest_value_ties_to_even() {
        // Every 9973rd f32 bit pattern (some 430 000 values of every
        // exponent), checked against a search over the f16/bf16 values.
        let to16 = |b: u16| F16::from_bits(b).to_f32();
        let tob = |b: u16| Bf16::from_bits(b).to_f32();
        let mut u: u32 = 0;
        loop {
            let x = f32::from_bits(u);
            if !x.is_nan() {
                assert_eq!(
                    f16(x),
                    nearest(x, to16, 0x7bff, 0x7c00),
                    "f16 of {:e} ({:#x})",
                    x,
                    u
                );
                assert_eq!(
                    bf16(x),
                    nearest(x, tob, 0x7f7f, 0x7f80),
                    "bf16 of {:e} ({:#x})",
                    x,
                    u
                );
            }
            match u.checked_add(9973) {
                Some(v) => u = v,
                None => break,
            }
        }
    }

    /// Between every two neighbouring finite values `lo < hi` of one sign
    /// (`to` exact): the midpoint (exact in f32) goes to the even one, the
    /// f32 just below it to `lo`, just above it to `hi`.
    fn midpoints(from: impl Fn(f32) -> u16, to: impl Fn(u16) -> f32, finite_max: u16, what: &str) {
        for sign in [0u16, 0x8000] {
            for lo in 0..finite_max {
                let (a, b) = (to(sign | lo), to(sign | (lo + 1)));
                let mid = a + (b - a) / 2.0; // (a + b) / 2 overflows near MAX
                assert_eq!(f64::from(mid), (f64::from(a) + f64::from(b)) / 2.0, "exact");
                let even = if lo & 1 == 0 { lo } else { lo + 1 };
                let toward_zero = f32::from_bits(mid.to_bits() - 1);
                let away = f32::from_bits(mid.to_bits() + 1);
                assert_eq!(from(mid), sign | even, "{} tie {:e}", what, mid);
                assert_eq!(from(toward_zero), sign | lo, "{} below {:e}", what, mid);
                assert_eq!(from(away), sign | (lo + 1), "{} above {:e}", what, mid);
            }
        }
    }

    #[test]
    fn every_tie_goes_to_even() {
        midpoints(f16, |b| F16::from_bits(b).to_f32(), 0x7bff, "f16");
        midpoints(bf16, |b| Bf16::from_bits(b).to_f32(), 0x7f7f, "bf16");
    }

    #[test]
    fn comparisons_are_ieee() {
        assert_eq!(F16::from_bits(0x8000), F16::ZERO, "-0 == +0");
        assert_ne!(F16::NAN, F16::NAN);
        assert_ne!(Bf16::NAN, Bf16::NAN);
        assert!(F16::from_f32(-3.0) < F16::ONE);
        assert!(Bf16::MAX < Bf16::INFINITY);
        assert!(Bf16::NEG_INFINITY < Bf16::MIN);
        assert_eq!(F16::NAN.partial_cmp(&F16::ONE), None);
        assert_eq!(format!("{:?} {}", F16::from_f32(-1.5), Bf16::ONE), "-1.5 1");
        assert_eq!(format!("{:?}", F16::INFINITY), "inf");
    }
}

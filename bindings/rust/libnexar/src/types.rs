//! Element types and reduction operators.

use crate::float16::{Bf16, F16};
use libnexar_sys as sys;

mod sealed {
    pub trait Sealed {}
}

/// A nexar data type (`NEXAR_DTYPE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// `NEXAR_DTYPE_F32`
    F32,
    /// `NEXAR_DTYPE_F64`
    F64,
    /// `NEXAR_DTYPE_F16`: [`F16`](crate::F16)
    F16,
    /// `NEXAR_DTYPE_BF16`: [`Bf16`](crate::Bf16)
    Bf16,
    /// `NEXAR_DTYPE_I8`
    I8,
    /// `NEXAR_DTYPE_I32`
    I32,
    /// `NEXAR_DTYPE_I64`
    I64,
    /// `NEXAR_DTYPE_U8`
    U8,
    /// `NEXAR_DTYPE_U32`
    U32,
    /// `NEXAR_DTYPE_U64`
    U64,
}

impl Dtype {
    /// The C code (`NEXAR_DTYPE_*`).
    pub fn code(self) -> sys::nexar_dtype_t {
        match self {
            Dtype::F32 => sys::NEXAR_DTYPE_F32,
            Dtype::F64 => sys::NEXAR_DTYPE_F64,
            Dtype::F16 => sys::NEXAR_DTYPE_F16,
            Dtype::Bf16 => sys::NEXAR_DTYPE_BF16,
            Dtype::I8 => sys::NEXAR_DTYPE_I8,
            Dtype::I32 => sys::NEXAR_DTYPE_I32,
            Dtype::I64 => sys::NEXAR_DTYPE_I64,
            Dtype::U8 => sys::NEXAR_DTYPE_U8,
            Dtype::U32 => sys::NEXAR_DTYPE_U32,
            Dtype::U64 => sys::NEXAR_DTYPE_U64,
        }
    }

    /// Bytes per element, as the loaded library says (`nexar_dtype_size`).
    pub fn size(self) -> usize {
        // SAFETY: a plain function of an integer.
        unsafe { sys::nexar_dtype_size(self.code()) }
    }
}

/// A Rust type nexar can reduce and move: `f32`, `f64`, [`F16`], [`Bf16`],
/// `i8`, `i32`, `i64`, `u8`, `u32`, `u64`. Sealed: the list is the C ABI's.
pub trait Element: sealed::Sealed + Copy + Send + Sync + 'static {
    /// The matching nexar data type.
    const DTYPE: Dtype;
    /// Zero (new output buffers are filled with it).
    const ZERO: Self;
}

macro_rules! element {
    ($($t:ty => $d:ident, $z:expr;)*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: Dtype = Dtype::$d;
            const ZERO: Self = $z;
        }
    )*};
}

element! {
    f32 => F32, 0.0;
    f64 => F64, 0.0;
    F16 => F16, F16::from_bits(0);
    Bf16 => Bf16, Bf16::from_bits(0);
    i8 => I8, 0;
    i32 => I32, 0;
    i64 => I64, 0;
    u8 => U8, 0;
    u32 => U32, 0;
    u64 => U64, 0;
}

/// A reduction operator (`NEXAR_OP_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `NEXAR_OP_SUM`
    Sum,
    /// `NEXAR_OP_PROD`
    Prod,
    /// `NEXAR_OP_MIN`
    Min,
    /// `NEXAR_OP_MAX`
    Max,
}

impl Op {
    /// The C code (`NEXAR_OP_*`).
    pub fn code(self) -> sys::nexar_op_t {
        match self {
            Op::Sum => sys::NEXAR_OP_SUM,
            Op::Prod => sys::NEXAR_OP_PROD,
            Op::Min => sys::NEXAR_OP_MIN,
            Op::Max => sys::NEXAR_OP_MAX,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{align_of, size_of};

    fn check<T: Element>(code: sys::nexar_dtype_t) {
        assert_eq!(T::DTYPE.code(), code, "{:?}", T::DTYPE);
        assert_eq!(
            size_of::<T>(),
            T::DTYPE.size(),
            "{:?}: nexar's size",
            T::DTYPE
        );
        assert!(align_of::<T>() <= size_of::<T>());
    }

    #[test]
    fn every_element_has_nexars_dtype_and_size() {
        check::<f32>(sys::NEXAR_DTYPE_F32);
        check::<f64>(sys::NEXAR_DTYPE_F64);
        check::<F16>(sys::NEXAR_DTYPE_F16);
        check::<Bf16>(sys::NEXAR_DTYPE_BF16);
        check::<i8>(sys::NEXAR_DTYPE_I8);
        check::<i32>(sys::NEXAR_DTYPE_I32);
        check::<i64>(sys::NEXAR_DTYPE_I64);
        check::<u8>(sys::NEXAR_DTYPE_U8);
        check::<u32>(sys::NEXAR_DTYPE_U32);
        check::<u64>(sys::NEXAR_DTYPE_U64);
        assert_eq!(F16::ZERO.to_bits(), <F16 as Element>::ZERO.to_bits());
        assert_eq!(Bf16::ZERO.to_bits(), <Bf16 as Element>::ZERO.to_bits());
    }
}

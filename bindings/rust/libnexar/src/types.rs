//! Element types and reduction operators.

use libnexar_sys as sys;

mod sealed {
    pub trait Sealed {}
}

/// A nexar data type (`NEXAR_DTYPE_*`). `F16` and `BF16` exist in the C ABI
/// but have no [`Element`] here (Rust has no such primitive types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// `NEXAR_DTYPE_F32`
    F32,
    /// `NEXAR_DTYPE_F64`
    F64,
    /// `NEXAR_DTYPE_F16`
    F16,
    /// `NEXAR_DTYPE_BF16`
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

/// A Rust type nexar can reduce and move: `f32`, `f64`, `i8`, `i32`, `i64`,
/// `u8`, `u32`, `u64`. Sealed: the list is the C ABI's.
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

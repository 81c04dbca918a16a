//! Safe Rust binding of nexar: collectives, point-to-point messages and RPC
//! between the ranks of a group, over encrypted QUIC.
//!
//! This crate wraps the stable C ABI of `libnexar.so.0` (`include/nexar.h`,
//! declared in [`libnexar_sys`]). It is thin: every operation is one C call;
//! statuses become [`Error`]s carrying nexar's message; completion callbacks
//! become [`Future`](std::future::Future)s.
//!
//! ```no_run
//! use libnexar::{Communicator, Op};
//!
//! // Two ranks inside this process, connected over loopback QUIC.
//! let world = Communicator::bootstrap_local(2)?;
//! std::thread::scope(|s| {
//!     for comm in &world {
//!         s.spawn(move || {
//!             let mut v = vec![comm.rank() as f32 + 1.0; 4];
//!             comm.all_reduce(&mut v, Op::Sum).unwrap(); // blocking
//!             assert_eq!(v, [3.0; 4]);
//!         });
//!     }
//! });
//!
//! // Asynchronous: the operation owns its buffer until it completes.
//! let a = world[0].all_reduce_async(vec![1i64, 2], Op::Max);
//! let b = world[1].all_reduce_async(vec![5i64, 0], Op::Max);
//! assert_eq!(libnexar::block_on(a)?, [5, 2]);
//! assert_eq!(b.wait()?, [5, 2]);
//! # Ok::<(), libnexar::Error>(())
//! ```
//!
//! # Threads and callbacks
//!
//! * A [`Communicator`] is `Send + Sync`: any method from any thread, several
//!   at once. Collectives must still be issued in the same order on every rank.
//! * Blocking methods (`all_reduce`, `send`, ...) borrow slices and call nexar
//!   with `done == NULL`.
//! * `*_async` methods take `Vec`s by value and return a [`Pending`] future.
//!   nexar drives the operation on its own threads whether or not the future
//!   is polled; its completion callback stores the outcome and wakes the
//!   future's waker. Dropping a `Pending` early is safe: the buffers stay
//!   alive until nexar has finished with them.
//! * RPC handlers and wakers run on nexar's completion thread; a panic there
//!   is caught (never unwinds into C). Blocking there fails with
//!   [`Status::WouldDeadlock`].
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

#[macro_use]
mod macros;

mod comm;
mod error;
mod failure;
mod float16;
mod log;
mod options;
mod pending;
mod rpc;
mod seed;
mod types;

pub use comm::{CompressKind, Communicator, Compressor, Stats, SymmetricBuffer};
pub use error::{last_error_message, Error, Result, ReturnedBuffer, Status};
pub use float16::{Bf16, F16};
pub use libnexar_sys as sys;
pub use log::{clear_log_handler, set_log_handler, LogLevel};
pub use options::{CompletionMode, Options, PoolProfile, Shm, Topology};
pub use pending::{block_on, in_callback, Pending};
pub use rpc::RpcResult;
pub use seed::{Seed, SeedOptions};
pub use types::{Dtype, Element, Op};

/// The version of the libnexar actually loaded (`nexar_version_string`), e.g. `"0.1.0"`.
pub fn version() -> String {
    // SAFETY: static storage, NUL-terminated (NULL handled anyway).
    unsafe { error::cstr_lossy(sys::nexar_version_string()) }
}

/// `NEXAR_VERSION_NUMBER` of the libnexar actually loaded (major*10000 + minor*100 + patch).
pub fn version_number() -> u32 {
    // SAFETY: a plain call without arguments.
    unsafe { sys::nexar_version() }
}

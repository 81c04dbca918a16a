//! The failure callback: a Rust closure behind one C trampoline.

use crate::error::Status;
use crate::pending::{lock, CallbackGuard};
use crate::rpc::panic_message;
use libnexar_sys as sys;
use std::io::Write;
use std::os::raw::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

/// A failure callback, as the communicator stores it: the failed rank and the
/// cause ([`Status::PeerFailed`] or [`Status::Aborted`]).
pub(crate) type FailureFn = dyn Fn(u32, Status) + Send + Sync + 'static;

/// What nexar's `user_data` points to for the life of the handle. Replacing
/// the closure swaps `f`; a call already running keeps its own `Arc` of the
/// old one, which is freed when that call returns.
#[derive(Default)]
pub(crate) struct FailureSlot {
    pub(crate) f: Mutex<Option<Arc<FailureFn>>>,
}

impl FailureSlot {
    /// The current closure, cloned so that it runs without the lock held (it
    /// may replace itself).
    fn current(&self) -> Option<Arc<FailureFn>> {
        lock(&self.f).clone()
    }
}

/// The C failure callback behind every Rust one, where the communicator's
/// callbacks run. Never unwinds into C: a panic is written to stderr.
pub(crate) unsafe extern "C" fn failure_trampoline(
    user_data: *mut c_void,
    _comm: *mut sys::nexar_comm_t,
    rank: u32,
    cause: sys::nexar_status_t,
) {
    let _guard = CallbackGuard::enter();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: user_data is the FailureSlot of the communicator that
        // registered this trampoline; it lives until the handle is
        // destroyed, after which nexar calls no callback.
        let slot = unsafe { &*(user_data as *const FailureSlot) };
        if let Some(f) = slot.current() {
            f(rank, Status::from_code(cause));
        }
    }));
    if let Err(panic) = outcome {
        let _ = writeln!(
            std::io::stderr(),
            "nexar: the failure callback for rank {rank} panicked: {}",
            panic_message(&*panic)
        );
        // Dropping a payload whose drop panicked could panic again.
        std::mem::forget(panic);
    }
}

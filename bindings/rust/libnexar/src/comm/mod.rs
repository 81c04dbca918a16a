//! The communicator: lifecycle, blocking and asynchronous operations, RPC,
//! one concern per module; this one holds the type, its Drop and the helpers
//! the others share.

use crate::failure::FailureSlot;
use crate::pending::in_callback;
use crate::rpc::Handlers;
use libnexar_sys as sys;
use std::fmt;
use std::mem::ManuallyDrop;
use std::os::raw::c_void;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

mod checks;
mod collectives;
mod collectives_async;
mod elastic;
mod faults;
mod gradients;
mod lifecycle;
mod p2p;
mod rpc;
mod stats;
mod symmetric;

pub use gradients::{CompressKind, Compressor};
pub use stats::Stats;
pub use symmetric::SymmetricBuffer;

/// One rank's view of a group of processes (`nexar_comm_t`).
///
/// Made by [`bootstrap_local`](Communicator::bootstrap_local) (a whole world
/// inside this process), [`init_from_env`](Communicator::init_from_env) or
/// [`join`](Communicator::join) (one rank of a cluster), or
/// [`split`](Communicator::split) ([`split_async`](Communicator::split_async)).
/// Dropping it destroys the handle: pending operations complete with
/// [`Status::Closed`](crate::Status::Closed) first.
///
/// Every method takes `&self` and may be called from any thread at once
/// (`Communicator` is `Send + Sync`; share it with `Arc` or scoped threads).
/// Collectives must be issued in the same order on every rank; ranks that
/// disagree get [`Status::Mismatch`](crate::Status::Mismatch), never a hang.
///
/// Blocking methods borrow slices and return when the operation is complete.
/// `*_async` methods take ownership of `Vec`s and return a [`Pending`](crate::Pending)
/// future that gives them back.
pub struct Communicator {
    raw: NonNull<sys::nexar_comm_t>,
    rank: u32,
    size: u32,
    rpc: Mutex<Handlers>,
    /// The failure callback's slot (nexar's user_data once one is set).
    failure: Arc<FailureSlot>,
}

// SAFETY: nexar's C ABI may be called from any thread, on one communicator
// from several threads at once (include/nexar.h, "Thread safety"). The one
// exception, nexar_comm_destroy racing other calls, cannot happen: it runs in
// Drop, which has the communicator exclusively. Handlers are Send + Sync.
unsafe impl Send for Communicator {}
// SAFETY: as above; &self methods only make thread-safe C calls or lock `rpc`
// or the failure slot.
unsafe impl Sync for Communicator {}

fn void<T>(p: *const T) -> *const c_void {
    p as *const c_void
}

fn void_mut<T>(p: *mut T) -> *mut c_void {
    p as *mut c_void
}

/// Destroys the handles of a failed creation.
fn destroy_all(handles: &[*mut sys::nexar_comm_t]) {
    for &h in handles {
        // SAFETY: each is NULL (ignored) or a handle nexar made that nothing
        // else owns.
        unsafe { sys::nexar_comm_destroy(h) };
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        let handlers = std::mem::take(self.rpc.get_mut().unwrap_or_else(|e| e.into_inner()));
        let raw = SendHandle(self.raw);
        if in_callback() {
            // On nexar's completion thread (say, the last Arc of this
            // communicator dropped by an RPC handler): destroy waits for
            // callbacks to end, so it runs on a thread of its own.
            // ManuallyDrop: if no thread can be made, the closure is dropped
            // unrun and the handlers, still registered, must not go with it
            // (the handle and they leak: better than a hang or a dangling call).
            let handlers = ManuallyDrop::new(handlers);
            let failure = ManuallyDrop::new(Arc::clone(&self.failure));
            let spawned = std::thread::Builder::new()
                .name("nexar-destroy".into())
                .spawn(move || {
                    let raw = raw;
                    // SAFETY: the handle is exclusively ours (Drop), destroyed once.
                    unsafe { sys::nexar_comm_destroy(raw.0.as_ptr()) };
                    drop(ManuallyDrop::into_inner(handlers));
                    drop(ManuallyDrop::into_inner(failure));
                });
            drop(spawned);
        } else {
            // SAFETY: the handle is exclusively ours (Drop: no other call can
            // race it), destroyed once. Pending operations complete before it
            // returns and no handler runs afterwards, so the handlers (and
            // the failure slot, a field) may go.
            unsafe { sys::nexar_comm_destroy(raw.0.as_ptr()) };
            drop(handlers);
        }
    }
}

/// A handle moved to the thread that destroys it.
struct SendHandle(NonNull<sys::nexar_comm_t>);
// SAFETY: nexar handles may be used (and destroyed) from any thread.
unsafe impl Send for SendHandle {}

impl fmt::Debug for Communicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Communicator(rank {} of {})", self.rank, self.size)
    }
}

//! Failures (docs/failures.md): observe failed members, revoke, agree,
//! shrink. These calls block.

use super::Communicator;
use crate::error::{Result, Status};
use crate::failure::{failure_trampoline, FailureFn};
use crate::pending::lock;
use libnexar_sys as sys;
use std::os::raw::c_void;
use std::ptr;
use std::sync::Arc;

impl Communicator {
    /// The ranks known to have failed, in the order they were learned (the
    /// list only grows; `nexar_comm_get_failed`).
    pub fn failed(&self) -> Result<Vec<u32>> {
        let mut n = 0u32;
        // SAFETY: a live handle; capacity 0 writes no rank.
        let st = unsafe { sys::nexar_comm_get_failed(self.as_raw(), ptr::null_mut(), 0, &mut n) };
        self.check("failed", st)?;
        let mut ranks = vec![0u32; n as usize];
        // SAFETY: ranks has room for n entries.
        let st =
            unsafe { sys::nexar_comm_get_failed(self.as_raw(), ranks.as_mut_ptr(), n, &mut n) };
        self.check("failed", st)?;
        ranks.truncate(n as usize);
        Ok(ranks)
    }

    /// Acknowledges the first `n` failures of [`failed`](Communicator::failed):
    /// [`agree`](Communicator::agree) no longer fails because of them.
    /// Returns how many are acknowledged now.
    pub fn ack_failed(&self, n: u32) -> Result<u32> {
        let mut acked = 0u32;
        // SAFETY: a live handle and a writable count.
        let st = unsafe { sys::nexar_comm_ack_failed(self.as_raw(), n, &mut acked) };
        self.check("ack_failed", st)?;
        Ok(acked)
    }

    /// Revokes the communicator at every live member: pending and later
    /// operations fail with [`Status::Revoked`](crate::Status::Revoked),
    /// except agree and shrink.
    pub fn revoke(&self) -> Result<()> {
        // SAFETY: a live handle.
        let st = unsafe { sys::nexar_comm_revoke(self.as_raw()) };
        self.check("revoke", st)
    }

    /// Whether the communicator was revoked, here or by a peer.
    pub fn is_revoked(&self) -> bool {
        // SAFETY: a live handle.
        unsafe { sys::nexar_comm_is_revoked(self.as_raw()) == 1 }
    }

    /// Fault-tolerant agreement: the AND of every live member's flags, the
    /// same at every survivor. The error is uniform too:
    /// [`Status::PeerFailed`](crate::Status::PeerFailed) when a member failed
    /// that not every survivor had acknowledged.
    pub fn agree(&self, flags: u64) -> Result<u64> {
        let mut v = flags;
        // SAFETY: a live handle; blocking call (done == NULL), so v outlives it.
        let st = unsafe { sys::nexar_comm_agree(self.as_raw(), &mut v, None, ptr::null_mut()) };
        self.check("agree", st)?;
        Ok(v)
    }

    /// [`agree`](Communicator::agree) that also returns the agreed flags when
    /// the agreement reports an unacknowledged failure.
    pub fn agree_with_status(&self, flags: u64) -> (u64, Result<()>) {
        let mut v = flags;
        // SAFETY: as in agree.
        let st = unsafe { sys::nexar_comm_agree(self.as_raw(), &mut v, None, ptr::null_mut()) };
        (v, self.check("agree", st))
    }

    /// A new communicator of the survivors, ranks renumbered in their old
    /// order (a collective over the survivors; works on a revoked one).
    pub fn shrink(&self) -> Result<Communicator> {
        let mut out = ptr::null_mut();
        // SAFETY: a live handle; out is a valid place for the new handle.
        let st = unsafe { sys::nexar_comm_shrink(self.as_raw(), &mut out, None, ptr::null_mut()) };
        self.check("shrink", st)?;
        Communicator::adopt("shrink", Some(self.rank), out)
    }

    /// Calls `f(rank, cause)` once per failed member
    /// (`nexar_comm_set_failure_callback`), where the communicator's
    /// callbacks run, never on the I/O thread. `cause` is
    /// [`Status::PeerFailed`] (it died, froze or left) or [`Status::Aborted`].
    /// Setting another replaces it: the old closure is dropped once no call of
    /// it runs. `f` must return promptly and must not wait for a nexar
    /// operation; a panic in it is written to stderr. Dropping the
    /// communicator drops it.
    pub fn set_failure_callback<F>(&self, f: F) -> Result<()>
    where
        F: Fn(u32, Status) + Send + Sync + 'static,
    {
        self.replace_failure_callback(Some(Arc::new(f)))
    }

    /// Removes the failure callback.
    pub fn clear_failure_callback(&self) -> Result<()> {
        self.replace_failure_callback(None)
    }

    fn replace_failure_callback(&self, f: Option<Arc<FailureFn>>) -> Result<()> {
        let set = f.is_some();
        // Held across the C call: concurrent setters leave nexar and the slot
        // in step. The trampoline takes it only to clone the closure.
        let mut slot = lock(&self.failure.f);
        let old = std::mem::replace(&mut *slot, f);
        let user_data = Arc::as_ptr(&self.failure) as *mut c_void;
        // SAFETY: a live handle; user_data is this communicator's slot, which
        // outlives the handle (dropped after nexar_comm_destroy).
        let st = unsafe {
            sys::nexar_comm_set_failure_callback(
                self.as_raw(),
                if set { Some(failure_trampoline) } else { None },
                user_data,
            )
        };
        if st != sys::NEXAR_OK {
            *slot = old;
        }
        drop(slot);
        self.check("set_failure_callback", st)
    }
}

//! The checks and errors every operation shares.

use super::{void_mut, Communicator};
use crate::error::{Error, Result, Status};
use crate::pending::{self, InPlace, Pending};
use crate::types::Element;
use libnexar_sys as sys;
use std::mem::size_of;
use std::os::raw::c_void;
use std::ptr;

impl Communicator {
    /// Turns a status just returned on this thread into a Result.
    pub(super) fn check(&self, op: &'static str, st: i32) -> Result<()> {
        if st == sys::NEXAR_OK {
            return Ok(());
        }
        // First, before any other nexar call on this thread: the call's own
        // record names the rank that failed it.
        Err(Error::last(st, op, Some(self.rank)))
    }

    pub(super) fn error(&self, status: Status, op: &'static str, message: String) -> Error {
        Error::new(status, op, Some(self.rank), None, message)
    }

    pub(super) fn invalid(&self, op: &'static str, message: String) -> Error {
        Error::invalid(op, Some(self.rank), message)
    }

    pub(super) fn times_size(&self, op: &'static str, n: usize) -> Result<usize> {
        n.checked_mul(self.size as usize).ok_or_else(|| {
            self.invalid(
                op,
                format!("{} elements times {} ranks overflow", n, self.size),
            )
        })
    }

    /// The elements per rank of a buffer of `n` elements (`what`) that holds
    /// one equal block for each rank.
    pub(super) fn block_len(&self, op: &'static str, what: &str, n: usize) -> Result<usize> {
        let ranks = self.size as usize;
        if n % ranks != 0 {
            return Err(self.invalid(
                op,
                format!(
                    "{} holds {} elements, not a multiple of the {} ranks",
                    what, n, self.size
                ),
            ));
        }
        Ok(n / ranks)
    }

    /// A blocking operation on one buffer, read and written in place:
    /// `call(d, n, done, user_data)` calls nexar with `done == None` on
    /// `d[0..n)`, which is `buf`, exclusively borrowed until it returns.
    pub(super) fn in_place<T: Element>(
        &self,
        op: &'static str,
        buf: &mut [T],
        call: impl FnOnce(*mut c_void, usize, sys::nexar_done_fn, *mut c_void) -> i32,
    ) -> Result<()> {
        let st = call(void_mut(buf.as_mut_ptr()), buf.len(), None, ptr::null_mut());
        self.check(op, st)
    }

    /// [`in_place`](Communicator::in_place) without blocking: `d[0..n)` is
    /// `buf`, owned by the shared record until `done` has run; the future
    /// gives it back.
    pub(super) fn in_place_async<T: Element>(
        &self,
        op: &'static str,
        buf: Vec<T>,
        call: impl FnOnce(*mut c_void, usize, sys::nexar_done_fn, *mut c_void) -> i32,
    ) -> Pending<Vec<T>> {
        pending::submit(
            op,
            self.rank,
            InPlace(buf),
            |p| (void_mut(p.0.as_mut_ptr()), p.0.len()),
            |(d, n), done, ud| call(d, n, done, ud),
        )
    }

    pub(super) fn byte_len<T>(&self, op: &'static str, n: usize) -> Result<usize> {
        n.checked_mul(size_of::<T>())
            .ok_or_else(|| self.invalid(op, format!("{} elements overflow a byte count", n)))
    }
}

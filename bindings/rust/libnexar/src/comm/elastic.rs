//! Elastic membership (docs/elastic.md): a world formed through an elastic
//! seed, with `Options::elastic(true)`, takes in processes that join it later.
//! These calls block.

use super::Communicator;
use crate::error::Result;
use libnexar_sys as sys;
use std::ptr;

impl Communicator {
    /// How many processes wait to join (local and cheap: the elastic seed
    /// tells every member whenever the number changes).
    pub fn pending_joins(&self) -> Result<u32> {
        let mut n = 0u32;
        // SAFETY: a live handle; n is a valid place for the count.
        let st = unsafe { sys::nexar_comm_pending_joins(self.as_raw(), &mut n) };
        self.check("pending_joins", st)?;
        Ok(n)
    }

    /// Collective over the members: admit up to `max_new` waiting processes.
    /// Returns the grown communicator (old ranks keep their numbers, new ones
    /// are appended); this one stays usable. A member failing during the grow
    /// fails it at every member with `PeerFailed`: shrink, then grow.
    pub fn grow(&self, max_new: u32) -> Result<Communicator> {
        let mut out = ptr::null_mut();
        // SAFETY: a live handle; out is a valid place for the new handle.
        let st = unsafe {
            sys::nexar_comm_grow(self.as_raw(), max_new, &mut out, None, ptr::null_mut())
        };
        self.check("grow", st)?;
        Communicator::adopt("grow", Some(self.rank), out)
    }
}

//! Symmetric memory: buffers in this rank's shared segment (`nexar_mem_alloc`).

use super::Communicator;
use crate::error::Result;
use crate::types::Element;
use libnexar_sys as sys;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// `len` elements of symmetric memory, freed (`nexar_mem_free`) when dropped.
/// Large messages sent from it to ranks on the same host travel by
/// reference, one copy instead of two; anywhere else it is an ordinary
/// slice. It borrows the communicator, so it cannot outlive it.
pub struct SymmetricBuffer<'c, T: Element> {
    comm: &'c Communicator,
    ptr: NonNull<T>,
    len: usize,
    _owns: PhantomData<T>,
}

impl Communicator {
    /// Allocates `len` elements of symmetric memory (zeroed here, so that
    /// the slice is initialised).
    pub fn mem_alloc<T: Element>(&self, len: usize) -> Result<SymmetricBuffer<'_, T>> {
        let bytes = len.checked_mul(std::mem::size_of::<T>()).filter(|&b| b > 0);
        let Some(bytes) = bytes else {
            return Err(self.error(
                crate::Status::InvalidArgument,
                "mem_alloc",
                format!("{len} elements: the size must be positive and fit"),
            ));
        };
        let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: a live handle and a writable out-pointer.
        let st = unsafe { sys::nexar_mem_alloc(self.as_raw(), bytes, &mut p) };
        self.check("mem_alloc", st)?;
        let ptr = NonNull::new(p.cast::<T>()).expect("nexar_mem_alloc returned NULL with NEXAR_OK");
        // SAFETY: bytes of page-aligned writable memory, ours until freed.
        unsafe { std::ptr::write_bytes(ptr.as_ptr().cast::<u8>(), 0, bytes) };
        Ok(SymmetricBuffer { comm: self, ptr, len, _owns: PhantomData })
    }
}

impl<T: Element> Deref for SymmetricBuffer<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: len initialised elements, alive while self is.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Element> DerefMut for SymmetricBuffer<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as deref, and &mut self is the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Element> Drop for SymmetricBuffer<'_, T> {
    fn drop(&mut self) {
        // SAFETY: a pointer nexar_mem_alloc gave this communicator's engine.
        let _ = unsafe { sys::nexar_mem_free(self.comm.as_raw(), self.ptr.as_ptr().cast()) };
    }
}

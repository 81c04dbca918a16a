//! Point-to-point: send and receive, blocking and asynchronous.

use super::{void, void_mut, Communicator};
use crate::error::Result;
use crate::pending::{self, InPlace, Pending};
use crate::types::Element;
use libnexar_sys as sys;
use std::ptr;

impl Communicator {
    /// Sends `buf`'s bytes to rank `dest` with `tag`; returns once the peer's
    /// transport acknowledged every byte. Messages between one pair with one
    /// tag arrive in send order.
    pub fn send<T: Element>(&self, buf: &[T], dest: u32, tag: u32) -> Result<()> {
        let bytes = self.byte_len::<T>("send", buf.len())?;
        // SAFETY: buf readable for `bytes` bytes during the blocking call.
        let st = unsafe {
            sys::nexar_send(
                self.as_raw(),
                void(buf.as_ptr()),
                bytes,
                dest,
                tag,
                None,
                ptr::null_mut(),
            )
        };
        self.check("send", st)
    }

    /// Receives the next message from rank `src` with `tag` into `buf`. A
    /// message of another size fails with
    /// [`Status::SizeMismatch`](crate::Status::SizeMismatch) (and is
    /// consumed).
    pub fn recv<T: Element>(&self, buf: &mut [T], src: u32, tag: u32) -> Result<()> {
        let bytes = self.byte_len::<T>("recv", buf.len())?;
        // SAFETY: buf writable for `bytes` bytes during the blocking call;
        // every bit pattern is a valid T (Element is sealed over plain numbers
        // and F16/Bf16, which wrap a u16).
        let st = unsafe {
            sys::nexar_recv(
                self.as_raw(),
                void_mut(buf.as_mut_ptr()),
                bytes,
                src,
                tag,
                None,
                ptr::null_mut(),
            )
        };
        self.check("recv", st)
    }

    // ---- Asynchronous ------------------------------------------------------------------

    /// [`send`](Communicator::send) without blocking; yields the buffer back
    /// once the peer acknowledged it.
    pub fn send_async<T: Element>(&self, buf: Vec<T>, dest: u32, tag: u32) -> Pending<Vec<T>> {
        let bytes = match self.byte_len::<T>("send", buf.len()) {
            Ok(b) => b,
            Err(e) => return Pending::failed(e.with_buffer(buf)),
        };
        let comm = self.as_raw();
        pending::submit(
            "send",
            self.rank,
            InPlace(buf),
            |p| void(p.0.as_ptr()),
            |s, done, ud| {
                // SAFETY: the buffer lives in the shared record until done ran.
                unsafe { sys::nexar_send(comm, s, bytes, dest, tag, done, ud) }
            },
        )
    }

    /// [`recv`](Communicator::recv) without blocking; yields the filled buffer.
    pub fn recv_async<T: Element>(&self, buf: Vec<T>, src: u32, tag: u32) -> Pending<Vec<T>> {
        let bytes = match self.byte_len::<T>("recv", buf.len()) {
            Ok(b) => b,
            Err(e) => return Pending::failed(e.with_buffer(buf)),
        };
        let comm = self.as_raw();
        pending::submit(
            "recv",
            self.rank,
            InPlace(buf),
            |p| void_mut(p.0.as_mut_ptr()),
            |d, done, ud| {
                // SAFETY: the buffer lives in the shared record until done
                // ran; any bytes are a valid T.
                unsafe { sys::nexar_recv(comm, d, bytes, src, tag, done, ud) }
            },
        )
    }
}

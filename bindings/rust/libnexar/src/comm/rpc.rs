//! RPC: calling a rank's function and serving one.

use super::{void, Communicator};
use crate::error::{Error, Result, Status};
use crate::pending::{self, in_callback, lock_unless_in_callback, Pending};
use crate::rpc::{self, HandlerBox, RpcPayload, RpcResult};
use libnexar_sys as sys;
use std::os::raw::c_void;
use std::ptr;

impl Communicator {
    /// Calls `fn_id` on rank `target` (this rank too) with `request`; returns
    /// the response. Fails with [`Status::RpcNotRegistered`],
    /// [`Status::RpcFailed`] (the handler's error, its message included),
    /// [`Status::Timeout`] after the RPC timeout, ...
    pub fn rpc_call(&self, target: u32, fn_id: u32, request: &[u8]) -> Result<Vec<u8>> {
        let mut response = ptr::null_mut();
        // SAFETY: request readable for its length and `response` writable
        // during the blocking call.
        let st = unsafe {
            sys::nexar_rpc_call(
                self.as_raw(),
                target,
                fn_id,
                void(request.as_ptr()),
                request.len(),
                &mut response,
                None,
                ptr::null_mut(),
            )
        };
        if st != sys::NEXAR_OK {
            let err = self.check("rpc_call", st);
            // SAFETY: NULL on failure per the header; freed if not, defensively.
            unsafe { sys::nexar_rpc_response_free(response) };
            err?;
        }
        // SAFETY: on success, a response owned by this caller.
        Ok(unsafe { rpc::take_response(response) })
    }

    /// Serves `fn_id` on this communicator with `handler(src_rank, request)`,
    /// replacing any earlier handler of `fn_id`. Its `Ok(bytes)` is the
    /// response; `Err(message)` fails the caller's call with
    /// [`Status::RpcFailed`] and the message; a panic is caught and fails it
    /// with the panic's message (it never unwinds into nexar).
    ///
    /// The handler runs on nexar's completion thread, one at a time per
    /// engine: it should return quickly. It may start `*_async` operations
    /// but not block on one (blocking calls fail with
    /// [`Status::WouldDeadlock`]). The communicator keeps the closure alive
    /// until it is replaced, unregistered or the communicator is dropped;
    /// once this returns, a replaced handler is not running any more (unless
    /// this is called from inside a handler).
    pub fn rpc_register<F>(&self, fn_id: u32, handler: F) -> Result<()>
    where
        F: Fn(u32, &[u8]) -> RpcResult + Send + Sync + 'static,
    {
        self.set_handler(
            "rpc_register",
            fn_id,
            Some(Box::new(HandlerBox {
                f: Box::new(handler),
            })),
        )
    }

    /// Stops serving `fn_id`: later calls fail with
    /// [`Status::RpcNotRegistered`]. Unregistering an unknown fn_id is fine.
    pub fn rpc_unregister(&self, fn_id: u32) -> Result<()> {
        self.set_handler("rpc_unregister", fn_id, None)
    }

    fn set_handler(
        &self,
        op: &'static str,
        fn_id: u32,
        fresh: Option<Box<HandlerBox>>,
    ) -> Result<()> {
        let inside = in_callback();
        // nexar_rpc_register (outside callbacks) waits for a running call of
        // the handler it replaces; that handler may itself be registering
        // here, so inside a callback the lock is only tried.
        let mut table = lock_unless_in_callback(&self.rpc).ok_or_else(|| {
            self.error(
                Status::WouldDeadlock,
                op,
                format!(
                    "{}: another thread is (un)registering an RPC handler on this communicator \
                     and may be waiting for this callback to end",
                    op
                ),
            )
        })?;
        let (handler, user_data): (sys::nexar_rpc_handler_fn, *mut c_void) = match &fresh {
            Some(b) => (
                Some(rpc::rpc_trampoline),
                &**b as *const HandlerBox as *mut c_void,
            ),
            None => (None, ptr::null_mut()),
        };
        // SAFETY: a live handle; user_data is the HandlerBox that `table`
        // keeps alive at a stable address while it is registered.
        let st = unsafe { sys::nexar_rpc_register(self.as_raw(), fn_id, handler, user_data) };
        if st != sys::NEXAR_OK {
            let err = Error::last(st, op, Some(self.rank));
            return Err(err);
        }
        let replaced = match fresh {
            Some(b) => table.live.insert(fn_id, b),
            None => table.live.remove(&fn_id),
        };
        if inside {
            // nexar did not wait for a running call of the replaced handler
            // (it may be the one running now): keep it until the end.
            table.retired.extend(replaced);
        } else {
            drop(table);
            drop(replaced); // no call of it is running or will start
        }
        Ok(())
    }

    /// [`rpc_call`](Communicator::rpc_call) without blocking; yields the
    /// response. Safe to call from inside an RPC handler.
    pub fn rpc_call_async(&self, target: u32, fn_id: u32, request: Vec<u8>) -> Pending<Vec<u8>> {
        let comm = self.as_raw();
        pending::submit(
            "rpc_call",
            self.rank,
            RpcPayload::new(request),
            |p| (void(p.request.as_ptr()), p.request.len(), p.slot),
            |(r, n, slot), done, ud| {
                // SAFETY: the request and the response slot live in the
                // shared record until done ran.
                unsafe { sys::nexar_rpc_call(comm, target, fn_id, r, n, slot, done, ud) }
            },
        )
    }
}

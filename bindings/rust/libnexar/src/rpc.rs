//! RPC: handlers (Rust closures behind one C trampoline) and responses.

use crate::error::{last_error_message, ReturnedBuffer};
use crate::pending::{CallbackGuard, Payload};
use libnexar_sys as sys;
use std::any::Any;
use std::collections::HashMap;
use std::ffi::CString;
use std::os::raw::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

/// What an RPC handler returns: the response bytes, or an error message that
/// fails the caller's call with [`Status::RpcFailed`](crate::Status::RpcFailed).
pub type RpcResult = std::result::Result<Vec<u8>, String>;

/// A handler closure, as the communicator stores it.
pub(crate) type HandlerFn = dyn Fn(u32, &[u8]) -> RpcResult + Send + Sync + 'static;

/// A registered handler. Boxed twice so that nexar's `user_data` is a thin
/// pointer; the outer box's address never changes while it is registered.
pub(crate) struct HandlerBox {
    pub(crate) f: Box<HandlerFn>,
}

/// The handlers a communicator keeps alive for nexar.
#[derive(Default)]
pub(crate) struct Handlers {
    /// What nexar calls, by fn_id.
    pub(crate) live: HashMap<u32, Box<HandlerBox>>,
    /// Handlers replaced from inside a callback, where nexar does not wait for
    /// a running invocation to end: kept until the communicator is dropped.
    /// Boxed: a running invocation's user_data must keep its address.
    #[allow(clippy::vec_box)]
    pub(crate) retired: Vec<Box<HandlerBox>>,
}

/// The text of a panic payload.
pub(crate) fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic with a non-string payload".to_string()
    }
}

/// Sets the reply's error text (NUL bytes become spaces).
///
/// # Safety
/// `reply` is the reply nexar passed to the running handler.
unsafe fn set_error(reply: *mut sys::nexar_rpc_reply_t, text: &str) {
    let text = CString::new(text.replace('\0', " ")).unwrap_or_default();
    // SAFETY: reply is valid during the handler (the caller's guarantee); the
    // message is copied by nexar.
    unsafe {
        sys::nexar_rpc_reply_set_error(reply, text.as_ptr());
    }
}

/// The C handler behind every Rust one (nexar's completion thread). Never
/// unwinds into C: a panic in the handler fails the call with
/// NEXAR_ERR_INTERNAL and the panic's message.
pub(crate) unsafe extern "C" fn rpc_trampoline(
    user_data: *mut c_void,
    src_rank: u32,
    _fn_id: u32,
    request: *const c_void,
    request_len: usize,
    reply: *mut sys::nexar_rpc_reply_t,
) -> sys::nexar_status_t {
    let _guard = CallbackGuard::enter();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: user_data is the HandlerBox registered with this trampoline;
        // the Communicator keeps it alive while nexar may call it (until it
        // is replaced outside a callback, which waits for running calls, or
        // retired, or the communicator destroyed).
        let handler = unsafe { &*(user_data as *const HandlerBox) };
        let bytes: &[u8] = if request.is_null() || request_len == 0 {
            &[]
        } else {
            // SAFETY: nexar passes request[0..request_len), valid during the call.
            unsafe { std::slice::from_raw_parts(request as *const u8, request_len) }
        };
        match catch_unwind(AssertUnwindSafe(|| (handler.f)(src_rank, bytes))) {
            Ok(Ok(response)) => {
                let data = if response.is_empty() {
                    ptr::null()
                } else {
                    response.as_ptr() as *const c_void
                };
                // SAFETY: reply is valid during the handler; data[0..len) is
                // readable (or NULL with len 0) and copied by nexar.
                let st = unsafe { sys::nexar_rpc_reply_set(reply, data, response.len()) };
                if st != sys::NEXAR_OK {
                    let why = last_error_message();
                    // SAFETY: reply is valid during the handler.
                    unsafe { set_error(reply, &why) };
                }
                st
            }
            Ok(Err(message)) => {
                // SAFETY: reply is valid during the handler.
                unsafe { set_error(reply, &message) };
                sys::NEXAR_ERR_RPC_FAILED
            }
            Err(panic) => {
                let text = format!("the RPC handler panicked: {}", panic_message(&*panic));
                // SAFETY: reply is valid during the handler.
                unsafe { set_error(reply, &text) };
                drop(panic);
                sys::NEXAR_ERR_INTERNAL
            }
        }
    }));
    match outcome {
        Ok(st) => st,
        Err(panic) => {
            // Dropping a payload whose drop panicked could panic again.
            std::mem::forget(panic);
            sys::NEXAR_ERR_INTERNAL
        }
    }
}

/// Copies a response's bytes and frees it.
///
/// # Safety
/// `response` is NULL or a response nexar gave this caller, not freed yet.
pub(crate) unsafe fn take_response(response: *mut sys::nexar_rpc_response_t) -> Vec<u8> {
    if response.is_null() {
        return Vec::new();
    }
    // SAFETY: a live response (the caller's guarantee): data is NULL or
    // points to size readable bytes until it is freed below.
    unsafe {
        let data = sys::nexar_rpc_response_data(response) as *const u8;
        let len = sys::nexar_rpc_response_size(response);
        let bytes = if data.is_null() || len == 0 {
            Vec::new()
        } else {
            std::slice::from_raw_parts(data, len).to_vec()
        };
        sys::nexar_rpc_response_free(response);
        bytes
    }
}

/// An asynchronous RPC call's buffers: the request, and the slot nexar
/// writes the response handle into (its own heap allocation, so that nexar
/// writes to memory nothing else refers to).
pub(crate) struct RpcPayload {
    pub(crate) request: Vec<u8>,
    pub(crate) slot: *mut *mut sys::nexar_rpc_response_t,
}

// SAFETY: the slot is owned exclusively by this payload (allocated in `new`,
// freed in Drop); nexar writes it before done runs, and the payload is only
// read after that (it moves between threads with the shared record).
unsafe impl Send for RpcPayload {}

impl RpcPayload {
    pub(crate) fn new(request: Vec<u8>) -> RpcPayload {
        RpcPayload {
            request,
            slot: Box::into_raw(Box::new(ptr::null_mut())),
        }
    }
}

impl Payload for RpcPayload {
    type Output = Vec<u8>;
    fn finish(self) -> Option<Vec<u8>> {
        // SAFETY: the slot is valid until Drop; the call has completed, so
        // nexar no longer writes it. The response is taken out here and the
        // slot reset, so Drop does not free it again.
        Some(unsafe {
            let response = std::mem::replace(&mut *self.slot, ptr::null_mut());
            take_response(response)
        })
    }
    fn give_back(mut self) -> ReturnedBuffer {
        ReturnedBuffer::holding(std::mem::take(&mut self.request))
    }
}

impl Drop for RpcPayload {
    fn drop(&mut self) {
        // SAFETY: the slot came from Box::into_raw in `new` and is freed only
        // here. The payload is dropped only after the call completed (or was
        // refused), so nexar no longer writes it; a response still there is
        // ours to free.
        unsafe {
            let slot = Box::from_raw(self.slot);
            if !slot.is_null() {
                sys::nexar_rpc_response_free(*slot);
            }
        }
    }
}

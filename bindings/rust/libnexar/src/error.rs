//! Statuses and errors.

use libnexar_sys as sys;
use std::any::Any;
use std::ffi::CStr;
use std::fmt;
use std::mem::{self, MaybeUninit};

/// A nexar status code (`NEXAR_OK`, `NEXAR_ERR_*`). The values never change;
/// codes this binding does not know yet come as [`Status::Unknown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// `NEXAR_OK`.
    Ok,
    /// `NEXAR_ERR_INVALID_ARGUMENT`.
    InvalidArgument,
    /// `NEXAR_ERR_INVALID_RANK`: a rank outside the communicator.
    InvalidRank,
    /// `NEXAR_ERR_SIZE_MISMATCH`: a received message of another size.
    SizeMismatch,
    /// `NEXAR_ERR_TIMEOUT`.
    Timeout,
    /// `NEXAR_ERR_PEER_FAILED`: a peer died or stopped answering.
    PeerFailed,
    /// `NEXAR_ERR_ABORTED`: the communicator was aborted (here or by a peer).
    Aborted,
    /// `NEXAR_ERR_CLOSED`: the communicator was destroyed.
    Closed,
    /// `NEXAR_ERR_MISMATCH`: ranks issued different collectives or arguments.
    Mismatch,
    /// `NEXAR_ERR_TLS`.
    Tls,
    /// `NEXAR_ERR_AUTH`.
    Auth,
    /// `NEXAR_ERR_PROTOCOL`.
    Protocol,
    /// `NEXAR_ERR_NO_MEMORY`.
    NoMemory,
    /// `NEXAR_ERR_IO`.
    Io,
    /// `NEXAR_ERR_UNSUPPORTED`.
    Unsupported,
    /// `NEXAR_ERR_NOT_FOUND`.
    NotFound,
    /// `NEXAR_ERR_WOULD_DEADLOCK`: a blocking call (or wait) from inside a
    /// completion callback or RPC handler.
    WouldDeadlock,
    /// `NEXAR_ERR_INTERNAL`.
    Internal,
    /// `NEXAR_ERR_RPC_NOT_REGISTERED`: no handler for that fn_id on the target.
    RpcNotRegistered,
    /// `NEXAR_ERR_RPC_FAILED`: the target's handler returned an error.
    RpcFailed,
    /// `NEXAR_ERR_REVOKED`: the communicator was revoked, here or by a peer.
    Revoked,
    /// `NEXAR_ERR_EXCLUDED`: the peers declared this process failed.
    Excluded,
    /// A code this binding does not name.
    Unknown(i32),
}

const TABLE: &[(Status, i32, &str)] = &[
    (Status::Ok, sys::NEXAR_OK, "NEXAR_OK"),
    (
        Status::InvalidArgument,
        sys::NEXAR_ERR_INVALID_ARGUMENT,
        "NEXAR_ERR_INVALID_ARGUMENT",
    ),
    (
        Status::InvalidRank,
        sys::NEXAR_ERR_INVALID_RANK,
        "NEXAR_ERR_INVALID_RANK",
    ),
    (
        Status::SizeMismatch,
        sys::NEXAR_ERR_SIZE_MISMATCH,
        "NEXAR_ERR_SIZE_MISMATCH",
    ),
    (Status::Timeout, sys::NEXAR_ERR_TIMEOUT, "NEXAR_ERR_TIMEOUT"),
    (
        Status::PeerFailed,
        sys::NEXAR_ERR_PEER_FAILED,
        "NEXAR_ERR_PEER_FAILED",
    ),
    (Status::Aborted, sys::NEXAR_ERR_ABORTED, "NEXAR_ERR_ABORTED"),
    (Status::Closed, sys::NEXAR_ERR_CLOSED, "NEXAR_ERR_CLOSED"),
    (
        Status::Mismatch,
        sys::NEXAR_ERR_MISMATCH,
        "NEXAR_ERR_MISMATCH",
    ),
    (Status::Tls, sys::NEXAR_ERR_TLS, "NEXAR_ERR_TLS"),
    (Status::Auth, sys::NEXAR_ERR_AUTH, "NEXAR_ERR_AUTH"),
    (
        Status::Protocol,
        sys::NEXAR_ERR_PROTOCOL,
        "NEXAR_ERR_PROTOCOL",
    ),
    (
        Status::NoMemory,
        sys::NEXAR_ERR_NO_MEMORY,
        "NEXAR_ERR_NO_MEMORY",
    ),
    (Status::Io, sys::NEXAR_ERR_IO, "NEXAR_ERR_IO"),
    (
        Status::Unsupported,
        sys::NEXAR_ERR_UNSUPPORTED,
        "NEXAR_ERR_UNSUPPORTED",
    ),
    (
        Status::NotFound,
        sys::NEXAR_ERR_NOT_FOUND,
        "NEXAR_ERR_NOT_FOUND",
    ),
    (
        Status::WouldDeadlock,
        sys::NEXAR_ERR_WOULD_DEADLOCK,
        "NEXAR_ERR_WOULD_DEADLOCK",
    ),
    (
        Status::Internal,
        sys::NEXAR_ERR_INTERNAL,
        "NEXAR_ERR_INTERNAL",
    ),
    (
        Status::RpcNotRegistered,
        sys::NEXAR_ERR_RPC_NOT_REGISTERED,
        "NEXAR_ERR_RPC_NOT_REGISTERED",
    ),
    (
        Status::RpcFailed,
        sys::NEXAR_ERR_RPC_FAILED,
        "NEXAR_ERR_RPC_FAILED",
    ),
    (Status::Revoked, sys::NEXAR_ERR_REVOKED, "NEXAR_ERR_REVOKED"),
    (
        Status::Excluded,
        sys::NEXAR_ERR_EXCLUDED,
        "NEXAR_ERR_EXCLUDED",
    ),
];

impl Status {
    /// The status for a C code.
    pub fn from_code(code: i32) -> Status {
        TABLE
            .iter()
            .find(|e| e.1 == code)
            .map(|e| e.0)
            .unwrap_or(Status::Unknown(code))
    }

    /// The C code (`NEXAR_ERR_TIMEOUT` is -4).
    pub fn code(self) -> i32 {
        match self {
            Status::Unknown(code) => code,
            known => TABLE
                .iter()
                .find(|e| e.0 == known)
                .map(|e| e.1)
                .unwrap_or(i32::MIN),
        }
    }

    /// The C name, `"NEXAR_ERR_TIMEOUT"`; `"NEXAR_ERR_UNKNOWN"` for unknown codes.
    pub fn name(self) -> &'static str {
        TABLE
            .iter()
            .find(|e| e.0 == self)
            .map(|e| e.2)
            .unwrap_or("NEXAR_ERR_UNKNOWN")
    }

    /// nexar's own description (`nexar_status_str`: "NEXAR_ERR_TIMEOUT: ...").
    pub fn describe(self) -> String {
        // SAFETY: nexar_status_str accepts any code and returns static storage
        // (or, defensively handled, NULL).
        unsafe { cstr_lossy(sys::nexar_status_str(self.code())) }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Unknown(code) => write!(f, "NEXAR_ERR_UNKNOWN({})", code),
            s => f.write_str(s.name()),
        }
    }
}

/// A failed nexar operation.
///
/// `message` and `failed_rank` are nexar's own: from `nexar_last_error()` for a
/// call that failed synchronously (and for blocking calls), from the
/// completion for an asynchronous one. Displayed as
/// `all_reduce on rank 0 failed (NEXAR_ERR_TIMEOUT) [failed rank 2]: <message>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// What went wrong.
    pub status: Status,
    /// The rank that failed or did not answer, when nexar names one.
    pub failed_rank: Option<u32>,
    /// nexar's message (or this binding's, for arguments it refuses itself).
    pub message: String,
    /// The operation: `"all_reduce"`, `"recv"`, `"rpc_call"`, ...
    pub op: &'static str,
    /// The rank of the communicator the operation ran on, if there was one.
    pub rank: Option<u32>,
    /// What a failed `*_async` call hands back: the `Vec` it took (for
    /// `rpc_call_async`, the request). Empty for blocking calls.
    pub buffer: ReturnedBuffer,
}

/// The buffer a failed asynchronous operation gives back, so a caller can
/// retry or reuse it instead of losing it with the error. nexar is done with
/// it; for an operation that writes into its buffer (all_reduce, recv, ...)
/// the contents may be partly written.
///
/// ```no_run
/// # fn demo(comm: &libnexar::Communicator) {
/// match comm.recv_async(vec![0u8; 1024], 1, 7).wait() {
///     Ok(buf) => println!("received {} bytes", buf.len()),
///     Err(mut e) => {
///         let buf: Vec<u8> = e.buffer.take().expect("recv_async gives its buffer back");
///         eprintln!("{e}; its {} bytes can be used again", buf.len());
///     }
/// }
/// # }
/// ```
///
/// It is not part of the error's identity: a clone of an [`Error`] holds no
/// buffer (a buffer has one owner), and errors compare equal whatever their
/// buffers hold.
#[derive(Default)]
pub struct ReturnedBuffer(Option<Box<dyn Any + Send + Sync>>);

impl ReturnedBuffer {
    pub(crate) fn holding<B: Any + Send + Sync>(buffer: B) -> ReturnedBuffer {
        ReturnedBuffer(Some(Box::new(buffer)))
    }

    /// Takes the buffer out if it is a `B` (the type given to the `*_async`
    /// call, e.g. `Vec<f32>`); `None` when there is none or it is another
    /// type, which then stays.
    pub fn take<B: Any>(&mut self) -> Option<B> {
        match self.0.take()?.downcast::<B>() {
            Ok(b) => Some(*b),
            Err(other) => {
                self.0 = Some(other);
                None
            }
        }
    }

    /// True when there is no buffer (left to take).
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }
}

impl Clone for ReturnedBuffer {
    fn clone(&self) -> ReturnedBuffer {
        ReturnedBuffer(None)
    }
}

impl PartialEq for ReturnedBuffer {
    fn eq(&self, _: &ReturnedBuffer) -> bool {
        true
    }
}

impl Eq for ReturnedBuffer {}

impl fmt::Debug for ReturnedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.is_empty() {
            "ReturnedBuffer(empty)"
        } else {
            "ReturnedBuffer(held)"
        })
    }
}

impl Error {
    pub(crate) fn new(
        status: Status,
        op: &'static str,
        rank: Option<u32>,
        failed_rank: Option<u32>,
        message: String,
    ) -> Error {
        Error {
            status,
            failed_rank,
            message,
            op,
            rank,
            buffer: ReturnedBuffer::default(),
        }
    }

    /// This error, handing `buffer` back to the caller.
    pub(crate) fn with_buffer<B: Any + Send + Sync>(mut self, buffer: B) -> Error {
        self.buffer = ReturnedBuffer::holding(buffer);
        self
    }

    /// An error for a call that just failed on this thread, from the call's
    /// own record, `nexar_last_error()` (to be called before any other nexar
    /// call): its message and the rank it names (the peer a blocking receive
    /// lost, the rank that aborted).
    pub(crate) fn last(code: i32, op: &'static str, rank: Option<u32>) -> Error {
        let mut info = MaybeUninit::<sys::nexar_completion_t>::zeroed();
        // SAFETY: info points to writable memory of the size it declares; the
        // message is copied at once, while the thread-local record holds it.
        let (failed_rank, message) = unsafe {
            (*info.as_mut_ptr()).struct_size = mem::size_of::<sys::nexar_completion_t>();
            if sys::nexar_last_error(info.as_mut_ptr()) == sys::NEXAR_OK {
                let info = info.assume_init();
                (
                    u32::try_from(info.failed_rank).ok(),
                    cstr_lossy(info.message),
                )
            } else {
                (None, last_error_message())
            }
        };
        Error::new(Status::from_code(code), op, rank, failed_rank, message)
    }

    /// An argument this binding refuses before calling nexar.
    pub(crate) fn invalid(op: &'static str, rank: Option<u32>, message: String) -> Error {
        Error::new(Status::InvalidArgument, op, rank, None, message)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.op)?;
        if let Some(rank) = self.rank {
            write!(f, " on rank {}", rank)?;
        }
        write!(f, " failed ({})", self.status)?;
        if let Some(failed) = self.failed_rank {
            write!(f, " [failed rank {}]", failed)?;
        }
        if self.message.is_empty() {
            write!(f, ": {}", self.status.describe())
        } else {
            write!(f, ": {}", self.message)
        }
    }
}

impl std::error::Error for Error {}

/// `std::result::Result` with this crate's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// The message of the last failed synchronous call made by this thread.
pub fn last_error_message() -> String {
    // SAFETY: never NULL per the header, thread-local storage valid until the
    // next nexar call on this thread; copied at once (NULL handled anyway).
    unsafe { cstr_lossy(sys::nexar_last_error_message()) }
}

/// Copies a C string (NULL: empty).
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid for the call.
pub(crate) unsafe fn cstr_lossy(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: the caller guarantees a valid NUL-terminated string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

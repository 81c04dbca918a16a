//! nexar's log lines, handed to a Rust closure (`nexar_set_log_callback`).

use crate::error::{Error, Result, Status};
use crate::pending::{lock_unless_in_callback, CallbackGuard};
use libnexar_sys as sys;
use std::os::raw::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::sync::Mutex;

/// The level of a log line (`NEXAR_LOG_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// `NEXAR_LOG_ERROR`
    Error,
    /// `NEXAR_LOG_WARN`
    Warn,
    /// `NEXAR_LOG_INFO`
    Info,
    /// `NEXAR_LOG_DEBUG`
    Debug,
    /// `NEXAR_LOG_TRACE` (and anything finer)
    Trace,
}

impl LogLevel {
    fn from_code(level: i32) -> LogLevel {
        match level {
            sys::NEXAR_LOG_ERROR => LogLevel::Error,
            sys::NEXAR_LOG_WARN => LogLevel::Warn,
            sys::NEXAR_LOG_INFO => LogLevel::Info,
            sys::NEXAR_LOG_DEBUG => LogLevel::Debug,
            l if l < sys::NEXAR_LOG_ERROR => LogLevel::Error,
            _ => LogLevel::Trace,
        }
    }
}

type LogFn = dyn Fn(LogLevel, &str) + Send + Sync + 'static;

struct LogBox {
    f: Box<LogFn>,
}

/// The handler nexar calls now; kept here so it lives while registered.
static CURRENT: Mutex<Option<Box<LogBox>>> = Mutex::new(None);

unsafe extern "C" fn log_trampoline(user_data: *mut c_void, level: i32, line: *const c_char) {
    let _guard = CallbackGuard::enter();
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: user_data is the LogBox in CURRENT, which is only freed
        // after nexar_set_log_callback replaced it (and then it is not running).
        let handler = unsafe { &*(user_data as *const LogBox) };
        // SAFETY: line is a NUL-terminated string valid during the call.
        let text = unsafe { crate::error::cstr_lossy(line) };
        (handler.f)(LogLevel::from_code(level), &text);
    }));
    if let Err(panic) = result {
        std::mem::forget(panic);
    }
}

/// Sends nexar's log lines (those enabled by `NEXAR_LOG_LEVEL`, default warn)
/// to `handler(level, line)` instead of stderr, process-wide, replacing any
/// earlier handler. `line` is what nexar would print, without the newline.
///
/// The handler may run on any nexar thread, the I/O thread included: it must
/// return quickly and must not block (queue the line and return). Calls are
/// serialized. A panic in it is caught and the line dropped.
pub fn set_log_handler<F>(handler: F) -> Result<()>
where
    F: Fn(LogLevel, &str) + Send + Sync + 'static,
{
    install(Some(Box::new(LogBox {
        f: Box::new(handler),
    })))
}

/// Restores nexar's own logging to stderr.
pub fn clear_log_handler() -> Result<()> {
    install(None)
}

fn install(fresh: Option<Box<LogBox>>) -> Result<()> {
    // Replacing waits for a running call of the old handler; from inside one
    // (where nexar refuses anyway) the lock is only tried, never waited for.
    let mut current = lock_unless_in_callback(&CURRENT).ok_or_else(|| {
        Error::new(
            Status::WouldDeadlock,
            "set_log_handler",
            None,
            None,
            "set_log_handler: called from inside a nexar callback while another thread \
             replaces the log handler"
                .into(),
        )
    })?;
    let (f, user_data): (sys::nexar_log_fn, *mut c_void) = match &fresh {
        Some(b) => (Some(log_trampoline), &**b as *const LogBox as *mut c_void),
        None => (None, ptr::null_mut()),
    };
    // SAFETY: user_data is the LogBox that CURRENT keeps alive, at a stable
    // address, while it is registered.
    let st = unsafe { sys::nexar_set_log_callback(f, user_data) };
    if st != sys::NEXAR_OK {
        return Err(Error::last(st, "set_log_handler", None));
    }
    // Once nexar_set_log_callback returned, the previous handler is not
    // running and never called again: it may go.
    let old = std::mem::replace(&mut *current, fresh);
    drop(current);
    drop(old);
    Ok(())
}

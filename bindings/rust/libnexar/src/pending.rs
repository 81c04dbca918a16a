//! Asynchronous operations as futures, and a std-only `block_on`.
//!
//! An asynchronous operation moves its buffers into a heap-allocated
//! [`Shared`] record. nexar gets one strong reference as its `user_data`; the
//! returned [`Pending`] holds another. The C completion callback
//! ([`on_done`]) records the outcome, wakes the stored waker and drops
//! nexar's reference. So the buffers live until both the callback has run and
//! the future is gone: dropping a `Pending` early is safe, the record (and the
//! buffers) is freed by whichever of the two lets go last.

use crate::error::{Error, Result, ReturnedBuffer, Status};
use libnexar_sys as sys;
use std::cell::Cell;
use std::future::Future;
use std::os::raw::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

// ---- Running inside nexar's callbacks ------------------------------------------

thread_local! {
    static IN_CALLBACK: Cell<u32> = const { Cell::new(0) };
}

/// Marks this thread as running one of nexar's callbacks (a completion, an RPC
/// handler, a log line) for its lifetime.
pub(crate) struct CallbackGuard(());

impl CallbackGuard {
    pub(crate) fn enter() -> CallbackGuard {
        IN_CALLBACK.with(|c| c.set(c.get() + 1));
        CallbackGuard(())
    }
}

impl Drop for CallbackGuard {
    fn drop(&mut self) {
        IN_CALLBACK.with(|c| c.set(c.get().saturating_sub(1)));
    }
}

/// True on a thread that is running one of nexar's callbacks through this
/// crate (an RPC handler, or a waker woken by a completion). Waiting there
/// for another nexar operation would wait for the very thread that runs it.
pub fn in_callback() -> bool {
    IN_CALLBACK.with(|c| c.get() > 0)
}

/// Locks, ignoring poison: every critical section here leaves consistent data.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// [`lock`] for the tables of replaceable callbacks (RPC handlers, the log
/// handler), whose holder may be waiting for a running callback to end: on a
/// thread inside one of nexar's callbacks the lock is only tried, never
/// waited for. `None` when it is held there.
pub(crate) fn lock_unless_in_callback<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    if !in_callback() {
        return Some(lock(m));
    }
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

// ---- Payloads: what an operation owns ---------------------------------------------

/// The buffers one asynchronous operation owns while nexar uses them, and
/// what the future yields from them once it has succeeded (`None`: nexar
/// reported success without producing it, an internal error).
pub(crate) trait Payload: Send + 'static {
    type Output: Send + 'static;
    fn finish(self) -> Option<Self::Output>;
    /// What the error of a failed operation hands back to the caller: the
    /// buffer the `*_async` call took (nothing by default).
    fn give_back(self) -> ReturnedBuffer
    where
        Self: Sized,
    {
        ReturnedBuffer::default()
    }
}

/// One buffer, read and written in place; yields it back, and gives it back
/// on failure.
pub(crate) struct InPlace<T>(pub Vec<T>);

impl<T: Send + Sync + 'static> Payload for InPlace<T> {
    type Output = Vec<T>;
    fn finish(self) -> Option<Vec<T>> {
        Some(self.0)
    }
    fn give_back(self) -> ReturnedBuffer {
        ReturnedBuffer::holding(self.0)
    }
}

/// An input and an output buffer; yields the output, and gives the input
/// (the caller's) back on failure.
pub(crate) struct InOut<T> {
    pub input: Vec<T>,
    pub output: Vec<T>,
}

impl<T: Send + Sync + 'static> Payload for InOut<T> {
    type Output = Vec<T>;
    fn finish(self) -> Option<Vec<T>> {
        Some(self.output)
    }
    fn give_back(self) -> ReturnedBuffer {
        ReturnedBuffer::holding(self.input)
    }
}

/// No buffer (barrier).
pub(crate) struct Nothing;

impl Payload for Nothing {
    type Output = ();
    fn finish(self) -> Option<()> {
        Some(())
    }
}

// ---- The shared record ------------------------------------------------------------------

struct Outcome {
    status: i32,
    failed_rank: i32,
    message: String,
}

struct State<P> {
    /// Taken by the future once the operation completed: its output on
    /// success, the caller's buffer back in the error on failure. Dropped
    /// with the record when the future is gone first.
    payload: Option<P>,
    outcome: Option<Outcome>,
    waker: Option<Waker>,
}

pub(crate) struct Shared<P> {
    state: Mutex<State<P>>,
}

/// What a [`Pending`] needs from its record, whatever the payload type.
trait Completion<O>: Send + Sync {
    /// The outcome once complete: the output, or the error of `op` on `rank`
    /// holding the caller's buffer.
    fn poll_outcome(&self, waker: &Waker, op: &'static str, rank: Option<u32>) -> Poll<Result<O>>;
    fn is_complete(&self) -> bool;
}

impl<P: Payload> Completion<P::Output> for Shared<P> {
    fn poll_outcome(
        &self,
        waker: &Waker,
        op: &'static str,
        rank: Option<u32>,
    ) -> Poll<Result<P::Output>> {
        let mut st = lock(&self.state);
        match st.outcome.take() {
            Some(o) => {
                // nexar is done with the buffers: the callback has been called.
                let payload = st.payload.take();
                drop(st);
                let failed_rank = u32::try_from(o.failed_rank).ok();
                Poll::Ready(if o.status != sys::NEXAR_OK {
                    let mut err = Error::new(
                        Status::from_code(o.status),
                        op,
                        rank,
                        failed_rank,
                        o.message,
                    );
                    if let Some(p) = payload {
                        err.buffer = p.give_back();
                    }
                    Err(err)
                } else {
                    payload.and_then(Payload::finish).ok_or_else(|| {
                        Error::new(
                            Status::Internal,
                            op,
                            rank,
                            failed_rank,
                            "nexar reported success without a result".into(),
                        )
                    })
                })
            }
            None => {
                match &st.waker {
                    Some(w) if w.will_wake(waker) => {}
                    _ => st.waker = Some(waker.clone()),
                }
                Poll::Pending
            }
        }
    }

    fn is_complete(&self) -> bool {
        lock(&self.state).outcome.is_some()
    }
}

/// The completion callback of every asynchronous operation (nexar's
/// completion thread). Never unwinds into C.
pub(crate) unsafe extern "C" fn on_done<P: Payload>(
    user_data: *mut c_void,
    completion: *const sys::nexar_completion_t,
) {
    let _guard = CallbackGuard::enter();
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: user_data is the reference made by Arc::into_raw in
        // `submit` for this very operation; nexar calls done exactly once, so
        // it is taken back exactly once.
        let shared = unsafe { Arc::from_raw(user_data as *const Shared<P>) };
        // SAFETY: nexar passes a valid completion, readable during the call.
        let (status, failed_rank, message) = match unsafe { completion.as_ref() } {
            Some(c) if c.status == sys::NEXAR_OK => (c.status, c.failed_rank, String::new()),
            // SAFETY: the message is a NUL-terminated string valid during the
            // callback (never NULL; handled anyway); copied here.
            Some(c) => (c.status, c.failed_rank, unsafe {
                crate::error::cstr_lossy(c.message)
            }),
            None => (
                sys::NEXAR_ERR_INTERNAL,
                -1,
                "no completion record".to_string(),
            ),
        };
        let waker = {
            let mut st = lock(&shared.state);
            st.outcome = Some(Outcome {
                status,
                failed_rank,
                message,
            });
            st.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        // Dropping nexar's reference: if the future is gone, the buffers go now.
        drop(shared);
    }));
    if let Err(panic) = result {
        // Only a waker can panic here. Dropping its payload could panic again.
        std::mem::forget(panic);
    }
}

/// Starts an asynchronous operation: moves `payload` into a shared record,
/// lets `pointers` take raw pointers into it, then calls `call(pointers,
/// done, user_data)` (which calls nexar).
pub(crate) fn submit<P, X>(
    op: &'static str,
    rank: u32,
    payload: P,
    pointers: impl FnOnce(&mut P) -> X,
    call: impl FnOnce(X, sys::nexar_done_fn, *mut c_void) -> i32,
) -> Pending<P::Output>
where
    P: Payload,
{
    let mut payload = payload;
    // Raw pointers into the heap buffers the payload owns: moving the payload
    // (its Vec headers) below does not move what they point to.
    let ptrs = pointers(&mut payload);
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            payload: Some(payload),
            outcome: None,
            waker: None,
        }),
    });
    let user_data = Arc::into_raw(shared.clone()) as *mut c_void;
    let st = call(ptrs, Some(on_done::<P>), user_data);
    if st != sys::NEXAR_OK {
        let mut err = Error::last(st, op, Some(rank));
        // SAFETY: nexar refused the operation, so done will never run: take
        // back the reference handed to it.
        drop(unsafe { Arc::from_raw(user_data as *const Shared<P>) });
        if let Some(p) = lock(&shared.state).payload.take() {
            err.buffer = p.give_back();
        }
        return Pending::failed(err);
    }
    Pending {
        inner: Inner::Running(shared),
        op,
        rank: Some(rank),
    }
}

// ---- The future -----------------------------------------------------------------------

enum Inner<O> {
    Running(Arc<dyn Completion<O>>),
    Failed(Error),
    Finished,
}

/// An operation in flight: a [`Future`] that yields the operation's result
/// (its buffer, for most) or its [`Error`].
///
/// The operation runs whether or not the future is polled (nexar drives it);
/// polling only collects the outcome. Dropping it before completion is safe:
/// the operation goes on and its buffers are freed once it has completed.
/// It needs no particular executor: [`block_on`] or [`Pending::wait`] work
/// anywhere, any async runtime works too.
#[must_use = "the operation runs anyway; the Pending is how you learn its outcome"]
pub struct Pending<O> {
    inner: Inner<O>,
    op: &'static str,
    rank: Option<u32>,
}

impl<O> Pending<O> {
    pub(crate) fn failed(err: Error) -> Pending<O> {
        let (op, rank) = (err.op, err.rank);
        Pending {
            inner: Inner::Failed(err),
            op,
            rank,
        }
    }

    /// The operation's name (`"all_reduce"`, ...).
    pub fn op(&self) -> &'static str {
        self.op
    }

    /// True once the outcome is known (ready to be taken without waiting).
    pub fn is_complete(&self) -> bool {
        match &self.inner {
            Inner::Running(c) => c.is_complete(),
            Inner::Failed(_) | Inner::Finished => true,
        }
    }

    /// Blocks this thread until the operation completes and returns its
    /// outcome. From inside an RPC handler or a completion callback, where
    /// waiting would wait for the very thread that completes it, an
    /// operation that is not complete yet fails with `WouldDeadlock` instead.
    pub fn wait(self) -> Result<O> {
        if in_callback() && !self.is_complete() {
            return Err(Error::new(
                Status::WouldDeadlock,
                self.op,
                self.rank,
                None,
                format!(
                    "{}: waiting inside a nexar callback (an RPC handler or a completion) would \
                     wait for the thread that runs it; poll the future from elsewhere",
                    self.op
                ),
            ));
        }
        block_on(self)
    }
}

impl<O> Future for Pending<O> {
    type Output = Result<O>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<O>> {
        // Pending is Unpin (no self-references), so this is safe.
        let this = self.get_mut();
        let ready = match &this.inner {
            Inner::Running(c) => match c.poll_outcome(cx.waker(), this.op, this.rank) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(outcome) => outcome,
            },
            Inner::Failed(_) => match std::mem::replace(&mut this.inner, Inner::Finished) {
                Inner::Failed(e) => Err(e),
                _ => unreachable!(),
            },
            Inner::Finished => panic!(
                "libnexar: a Pending ({}) polled after it completed",
                this.op
            ),
        };
        this.inner = Inner::Finished;
        Poll::Ready(ready)
    }
}

impl<O> std::fmt::Debug for Pending<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("op", &self.op)
            .field("rank", &self.rank)
            .field("complete", &self.is_complete())
            .finish()
    }
}

// ---- block_on -------------------------------------------------------------------------------

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs a future to completion on this thread (parking it between polls).
/// A minimal executor for programs without one; any other works as well.
///
/// Do not call it from inside an RPC handler or a waker (nexar's completion
/// thread) on a future that needs that thread: use [`Pending::wait`], which
/// refuses instead of hanging.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = Box::pin(future);
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        thread::park();
    }
}

//! Asynchronous operations: futures that own their buffers.

#![deny(unsafe_op_in_unsafe_fn)]

mod common;

use common::world;
use libnexar::{block_on, Bf16, Op, Pending, Status, F16};
use std::alloc::{GlobalAlloc, Layout, System};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

/// Counts frees of blocks of exactly MARKED bytes (a size nothing else uses),
/// to see when a receive buffer is released.
struct Counting;

const MARKED: usize = 1_048_573;
static MARKED_FREED: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; counting
// is a side effect on an atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's guarantees are passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() == MARKED {
            MARKED_FREED.fetch_add(1, Ordering::SeqCst);
        }
        // SAFETY: the caller's guarantees are passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Polls every future until all are ready (one thread, one waker).
fn join_all<O: Unpin>(futures: Vec<Pending<O>>) -> Vec<libnexar::Result<O>> {
    struct JoinAll<O> {
        futures: Vec<Option<Pending<O>>>,
        out: Vec<Option<libnexar::Result<O>>>,
    }
    impl<O: Unpin> Future for JoinAll<O> {
        type Output = Vec<libnexar::Result<O>>;
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
            let this = self.get_mut();
            for (slot, out) in this.futures.iter_mut().zip(this.out.iter_mut()) {
                if let Some(f) = slot {
                    if let Poll::Ready(v) = Pin::new(f).poll(cx) {
                        *out = Some(v);
                        *slot = None;
                    }
                }
            }
            if this.out.iter().all(|o| o.is_some()) {
                Poll::Ready(this.out.iter_mut().map(|o| o.take().unwrap()).collect())
            } else {
                Poll::Pending
            }
        }
    }
    let n = futures.len();
    block_on(JoinAll {
        futures: futures.into_iter().map(Some).collect(),
        out: (0..n).map(|_| None).collect(),
    })
}

#[test]
fn one_thread_drives_every_rank() {
    // Nothing blocks while submitting, so one thread can start the same
    // collectives on all three ranks and only then wait.
    let w = world(3);
    let mut reduces = Vec::new();
    let mut gathers = Vec::new();
    let mut bcasts = Vec::new();
    let mut barriers = Vec::new();
    for c in &w {
        let r = c.rank() as f32;
        reduces.push(c.all_reduce_async(vec![r, 2.0 * r, 1.0], Op::Sum));
        reduces.push(c.all_reduce_async(vec![r], Op::Max));
        gathers.push(c.all_gather_async(vec![c.rank() as u64; 2]));
        let b = if c.rank() == 2 {
            vec![9i32, 8, 7]
        } else {
            vec![0; 3]
        };
        bcasts.push(c.broadcast_async(b, 2));
        barriers.push(c.barrier_async());
    }
    for (i, v) in join_all(reduces).into_iter().enumerate() {
        let v = v.unwrap();
        if i % 2 == 0 {
            assert_eq!(v, vec![3.0, 6.0, 3.0]);
        } else {
            assert_eq!(v, vec![2.0]);
        }
    }
    for v in join_all(gathers) {
        assert_eq!(v.unwrap(), vec![0, 0, 1, 1, 2, 2]);
    }
    for v in join_all(bcasts) {
        assert_eq!(v.unwrap(), vec![9, 8, 7]);
    }
    for v in join_all(barriers) {
        v.unwrap();
    }
}

#[test]
fn every_async_collective() {
    let w = world(3);
    let n = 3usize;
    let mut rs = Vec::new();
    let mut a2a = Vec::new();
    let mut gat = Vec::new();
    let mut sca = Vec::new();
    let mut red = Vec::new();
    let mut scan = Vec::new();
    let mut exscan = Vec::new();
    for c in &w {
        let r = c.rank() as i64;
        rs.push(c.reduce_scatter_async((0..2 * n as i64).map(|j| r + 10 * j).collect(), Op::Sum));
        a2a.push(c.all_to_all_async((0..n as i64).map(|j| r * 10 + j).collect()));
        gat.push(c.gather_async(vec![r + 100], 1));
        let send = if c.rank() == 0 {
            vec![5i64, 6, 7, 8, 9, 10]
        } else {
            Vec::new()
        };
        sca.push(c.scatter_async(send, 2, 0));
        red.push(c.reduce_async(vec![r + 1], Op::Prod, 0));
        scan.push(c.scan_async(vec![r + 1], Op::Sum));
        exscan.push(c.exscan_async(vec![r + 1], Op::Sum));
    }
    for (r, v) in join_all(rs).into_iter().enumerate() {
        let r = r as i64;
        assert_eq!(v.unwrap(), vec![3 + 30 * (2 * r), 3 + 30 * (2 * r + 1)]);
    }
    for (r, v) in join_all(a2a).into_iter().enumerate() {
        let r = r as i64;
        assert_eq!(v.unwrap(), (0..3).map(|i| i * 10 + r).collect::<Vec<_>>());
    }
    for (r, v) in join_all(gat).into_iter().enumerate() {
        let want = if r == 1 {
            vec![100, 101, 102]
        } else {
            Vec::new()
        };
        assert_eq!(v.unwrap(), want);
    }
    for (r, v) in join_all(sca).into_iter().enumerate() {
        let r = r as i64;
        assert_eq!(v.unwrap(), vec![5 + 2 * r, 6 + 2 * r]);
    }
    for (r, v) in join_all(red).into_iter().enumerate() {
        let want = if r == 0 { 6 } else { r as i64 + 1 };
        assert_eq!(v.unwrap(), vec![want]);
    }
    for (r, v) in join_all(scan).into_iter().enumerate() {
        let r = r as i64;
        assert_eq!(v.unwrap(), vec![(r + 1) * (r + 2) / 2]);
    }
    for (r, v) in join_all(exscan).into_iter().enumerate().skip(1) {
        let r = r as i64;
        assert_eq!(v.unwrap(), vec![r * (r + 1) / 2]);
    }
}

#[test]
fn f16_and_bf16_from_one_thread() {
    // Values and partial results exact in both types: compared bit for bit.
    fn h(v: &[f32]) -> Vec<F16> {
        v.iter().map(|&x| F16::from_f32(x)).collect()
    }
    fn b(v: &[f32]) -> Vec<Bf16> {
        v.iter().map(|&x| Bf16::from(x)).collect()
    }
    fn bits<T>(v: Vec<T>, to_bits: fn(T) -> u16) -> Vec<u16> {
        v.into_iter().map(to_bits).collect()
    }
    let w = world(3);
    let rows: [[f32; 3]; 3] = [[0.5, -2.0, 96.0], [1.5, -4.0, 64.0], [2.5, -6.0, 32.0]];
    let mut f16_sum = Vec::new();
    let mut bf16_sum = Vec::new();
    let mut f16_max = Vec::new();
    let mut bf16_min = Vec::new();
    let mut bcast = Vec::new();
    let mut f16_gather = Vec::new();
    let mut bf16_gather = Vec::new();
    for c in &w {
        let row = &rows[c.rank() as usize];
        let r = c.rank() as f32;
        f16_sum.push(c.all_reduce_async(h(row), Op::Sum));
        bf16_sum.push(c.all_reduce_async(b(row), Op::Sum));
        f16_max.push(c.all_reduce_async(h(row), Op::Max));
        bf16_min.push(c.all_reduce_async(b(row), Op::Min));
        let v = if c.rank() == 1 {
            b(&[-1.5, f32::INFINITY, 1.0e30])
        } else {
            vec![Bf16::ZERO; 3]
        };
        bcast.push(c.broadcast_async(v, 1));
        f16_gather.push(c.all_gather_async(h(&[r, r + 0.125])));
        bf16_gather.push(c.all_gather_async(b(&[-r])));
    }
    let want = bits(h(&[4.5, -12.0, 192.0]), F16::to_bits);
    for v in join_all(f16_sum) {
        assert_eq!(bits(v.unwrap(), F16::to_bits), want);
    }
    let want = bits(b(&[4.5, -12.0, 192.0]), Bf16::to_bits);
    for v in join_all(bf16_sum) {
        assert_eq!(bits(v.unwrap(), Bf16::to_bits), want);
    }
    let want = bits(h(&[2.5, -2.0, 96.0]), F16::to_bits);
    for v in join_all(f16_max) {
        assert_eq!(bits(v.unwrap(), F16::to_bits), want);
    }
    let want = bits(b(&[0.5, -6.0, 32.0]), Bf16::to_bits);
    for v in join_all(bf16_min) {
        assert_eq!(bits(v.unwrap(), Bf16::to_bits), want);
    }
    let want = bits(b(&[-1.5, f32::INFINITY, 1.0e30]), Bf16::to_bits);
    for v in join_all(bcast) {
        assert_eq!(bits(v.unwrap(), Bf16::to_bits), want);
    }
    let want = bits(h(&[0.0, 0.125, 1.0, 1.125, 2.0, 2.125]), F16::to_bits);
    for v in join_all(f16_gather) {
        assert_eq!(bits(v.unwrap(), F16::to_bits), want);
    }
    let want = bits(b(&[-0.0, -1.0, -2.0]), Bf16::to_bits);
    for v in join_all(bf16_gather) {
        assert_eq!(bits(v.unwrap(), Bf16::to_bits), want);
    }
    // Point to point, asynchronous on both sides.
    let recv = w[2].recv_async(vec![F16::ZERO; 3], 0, 21);
    let sent = w[0].send_async(h(&[65504.0, -0.5, 6.0e-8]), 2, 21);
    let sent = bits(block_on(sent).unwrap(), F16::to_bits);
    assert_eq!(
        sent,
        [0x7bff, 0xb800, 0x0001],
        "send yields its buffer back"
    );
    assert_eq!(bits(block_on(recv).unwrap(), F16::to_bits), sent);
}

#[test]
fn send_and_recv_give_their_buffers_back() {
    let w = world(2);
    let recv = w[1].recv_async(vec![0u32; 4096], 0, 11);
    let data: Vec<u32> = (0..4096).map(|i| i * 3).collect();
    let sent = w[0].send_async(data.clone(), 1, 11);
    assert_eq!(
        block_on(sent).unwrap(),
        data,
        "send yields its buffer back unchanged"
    );
    assert_eq!(block_on(recv).unwrap(), data);
    // A mismatched size through a future: the completion's status and message.
    let recv = w[1].recv_async(vec![0u8; 3], 0, 12);
    w[0].send(&[1u8; 5], 1, 12).unwrap();
    let e = recv.wait().unwrap_err();
    assert_eq!(e.status, Status::SizeMismatch, "{}", e);
    assert!(!e.message.is_empty());
    assert_eq!((e.op, e.rank), ("recv", Some(1)));
}

#[test]
fn futures_dropped_early_keep_their_buffers_until_done() {
    let w = world(2);
    for round in 0..20u32 {
        // A 1 MiB receive whose future is dropped at once: nexar still writes
        // into the buffer, which must stay alive until the callback ran.
        drop(w[1].recv_async(vec![0u8; 1 << 20], 0, round));
        // Collectives dropped on both ranks still complete, in order.
        drop(w[0].all_reduce_async(vec![1.0f64; 50_000], Op::Sum));
        drop(w[1].all_reduce_async(vec![2.0f64; 50_000], Op::Sum));
        // The sender's buffer too.
        drop(w[0].send_async(vec![round as u8; 1 << 20], 1, round));
        // A tag-ordered follow-up proves the dropped receive consumed its message.
        w[0].send(&[round], 1, round)
            .unwrap_or_else(|e| panic!("{}", e));
        let mut follow = [0u32];
        w[1].recv(&mut follow, 0, round).unwrap();
        assert_eq!(follow, [round]);
    }
    // The dropped collectives completed: the next one matches and is exact.
    let a = w[0].all_reduce_async(vec![1i32, 2], Op::Sum);
    let b = w[1].all_reduce_async(vec![10i32, 20], Op::Sum);
    assert_eq!(a.wait().unwrap(), vec![11, 22]);
    assert_eq!(b.wait().unwrap(), vec![11, 22]);
}

#[test]
fn a_dropped_receive_frees_its_buffer_only_after_completion() {
    let w = world(2);
    drop(w[1].recv_async(vec![0u8; MARKED], 0, 77));
    thread::sleep(Duration::from_millis(300));
    assert_eq!(
        MARKED_FREED.load(Ordering::SeqCst),
        0,
        "the future is gone but nexar may still write: the buffer must live"
    );
    let data = vec![5u8; MARKED + 1]; // not MARKED bytes itself
    w[0].send(&data[..MARKED], 1, 77).unwrap();
    let deadline = Instant::now() + common::BOUND;
    while MARKED_FREED.load(Ordering::SeqCst) == 0 {
        assert!(
            Instant::now() < deadline,
            "the completion never freed the buffer"
        );
        thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(MARKED_FREED.load(Ordering::SeqCst), 1);
}

#[test]
fn the_callback_wakes_the_waker() {
    struct Counter(AtomicUsize, thread::Thread);
    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
            self.1.unpark();
        }
    }
    let w = world(2);
    let counter = Arc::new(Counter(AtomicUsize::new(0), thread::current()));
    let waker = Waker::from(counter.clone());
    let mut cx = Context::from_waker(&waker);
    let mut recv = w[1].recv_async(vec![0u32; 2], 0, 5);
    assert!(Pin::new(&mut recv).poll(&mut cx).is_pending());
    assert!(!recv.is_complete());
    assert_eq!(counter.0.load(Ordering::SeqCst), 0);
    w[0].send(&[4u32, 2], 1, 5).unwrap();
    let deadline = Instant::now() + common::BOUND;
    while counter.0.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "never woken");
        thread::park_timeout(Duration::from_millis(100));
    }
    assert!(recv.is_complete());
    match Pin::new(&mut recv).poll(&mut cx) {
        Poll::Ready(v) => assert_eq!(v.unwrap(), vec![4, 2]),
        Poll::Pending => panic!("woken but not ready"),
    }
}

#[test]
fn futures_move_between_threads() {
    let w = world(2);
    let a = w[0].all_reduce_async(vec![1u64; 3], Op::Sum);
    let b = w[1].all_reduce_async(vec![2u64; 3], Op::Sum);
    let got = thread::scope(|s| {
        let ha = s.spawn(move || block_on(a));
        let hb = s.spawn(move || block_on(b));
        (ha.join().unwrap(), hb.join().unwrap())
    });
    assert_eq!(got.0.unwrap(), vec![3; 3]);
    assert_eq!(got.1.unwrap(), vec![3; 3]);
}

#[test]
fn local_refusals_are_ready_at_once() {
    let w = world(2);
    let p = w[0].reduce_scatter_async(vec![1u8; 3], Op::Sum);
    assert!(p.is_complete());
    let e = block_on(p).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("not a multiple of the 2 ranks"), "{}", e);
    let p = w[0].scatter_async(vec![1u8; 3], 2, 0);
    assert_eq!(block_on(p).unwrap_err().status, Status::InvalidArgument);
    let p = w[0].broadcast_async(vec![1u8; 3], 9);
    let e = block_on(p).unwrap_err();
    assert_eq!(e.status, Status::InvalidRank);
    assert!(e.message.contains("root 9"), "{}", e);
}

#[test]
fn polled_mode_completes_inside_poll() {
    let opts = common::options().completion_mode(libnexar::CompletionMode::Polled);
    let w = common::world_with(2, &opts);
    assert!(w[0].event_fd().is_some(), "polled mode has an event fd");
    let mut a = w[0].all_reduce_async(vec![1u32, 2], Op::Sum);
    let mut b = w[1].all_reduce_async(vec![3u32, 4], Op::Sum);
    let deadline = Instant::now() + common::BOUND;
    let mut ran = 0;
    while !(a.is_complete() && b.is_complete()) {
        assert!(Instant::now() < deadline, "never completed");
        for c in &w {
            ran += c.poll(16, Duration::from_millis(10)).unwrap();
        }
    }
    assert!(ran >= 2, "the completions ran inside poll");
    let noop = Waker::from(Arc::new(Counter0));
    let mut cx = Context::from_waker(&noop);
    for p in [&mut a, &mut b] {
        match Pin::new(p).poll(&mut cx) {
            Poll::Ready(v) => assert_eq!(v.unwrap(), vec![4, 6]),
            Poll::Pending => panic!("complete but pending"),
        }
    }
    let thread_mode = common::world(2);
    assert!(thread_mode[0].event_fd().is_none());
}

struct Counter0;
impl Wake for Counter0 {
    fn wake(self: Arc<Self>) {}
}

//! Point-to-point messages, and how failures become errors.

mod common;

use common::{on_each, options, world, world_with};
use libnexar::{Bf16, Communicator, Error, Op, Status, F16};
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn send_recv_ring() {
    for n in [2u32, 3] {
        let w = world(n);
        let out = on_each(&w, |c| {
            let r = c.rank();
            let payload: Vec<u32> = (0..1000).map(|i| r * 1_000_000 + i).collect();
            c.send(&payload, (r + 1) % n, 7).unwrap();
            let mut got = vec![0u32; 1000];
            c.recv(&mut got, (r + n - 1) % n, 7).unwrap();
            got
        });
        for (r, got) in out.iter().enumerate() {
            let from = (r as u32 + n - 1) % n;
            let want: Vec<u32> = (0..1000).map(|i| from * 1_000_000 + i).collect();
            assert_eq!(got, &want, "rank {}", r);
        }
    }
}

#[test]
fn tags_match_and_order_is_kept() {
    let w = world(2);
    on_each(&w, |c| {
        if c.rank() == 0 {
            c.send(&[1.5f64], 1, 1).unwrap();
            c.send(&[2.5f64], 1, 2).unwrap();
            for k in 0..5u8 {
                c.send(&[k; 3], 1, 9).unwrap();
            }
        } else {
            // Tag 2 first: tag 1's message waits for its own receive.
            let mut b = [0f64];
            c.recv(&mut b, 0, 2).unwrap();
            assert_eq!(b, [2.5]);
            c.recv(&mut b, 0, 1).unwrap();
            assert_eq!(b, [1.5]);
            for k in 0..5u8 {
                let mut m = [0u8; 3];
                c.recv(&mut m, 0, 9).unwrap();
                assert_eq!(m, [k; 3], "messages of one tag arrive in send order");
            }
        }
    });
}

#[test]
fn bytes_are_bytes_whatever_the_element() {
    let w = world(2);
    on_each(&w, |c| {
        if c.rank() == 0 {
            c.send(&[0x0102_0304u32, 0x0506_0708], 1, 0).unwrap();
        } else {
            let mut b = [0u8; 8];
            c.recv(&mut b, 0, 0).unwrap();
            let mut want = Vec::new();
            want.extend_from_slice(&0x0102_0304u32.to_ne_bytes());
            want.extend_from_slice(&0x0506_0708u32.to_ne_bytes());
            assert_eq!(&b[..], &want[..]);
        }
    });
}

#[test]
fn f16_and_bf16_travel_as_their_bits() {
    // Two bytes per element, bits untouched (a NaN's payload and sign, a
    // subnormal, -0).
    let f16_bits = [0x3c00u16, 0x0001, 0x8000, 0xfd01, 0x7bff];
    let bf16_bits = [0x3f80u16, 0xc000, 0x7f81, 0x0001];
    let w = world(2);
    on_each(&w, |c| {
        let h: Vec<F16> = f16_bits.iter().map(|&b| F16::from_bits(b)).collect();
        let b: Vec<Bf16> = bf16_bits.iter().map(|&b| Bf16::from_bits(b)).collect();
        if c.rank() == 0 {
            c.send(&h, 1, 4).unwrap();
            c.send(&h, 1, 5).unwrap();
            c.send(&b, 1, 6).unwrap();
        } else {
            let mut got = vec![F16::ZERO; f16_bits.len()];
            c.recv(&mut got, 0, 4).unwrap();
            let got: Vec<u16> = got.iter().map(|x| x.to_bits()).collect();
            assert_eq!(got, f16_bits);
            let mut raw = vec![0u8; 2 * f16_bits.len()];
            c.recv(&mut raw, 0, 5).unwrap();
            let want: Vec<u8> = f16_bits.iter().flat_map(|b| b.to_ne_bytes()).collect();
            assert_eq!(raw, want);
            let mut got = vec![Bf16::ZERO; bf16_bits.len()];
            c.recv(&mut got, 0, 6).unwrap();
            let got: Vec<u16> = got.iter().map(|x| x.to_bits()).collect();
            assert_eq!(got, bf16_bits);
        }
    });
}

#[test]
fn recv_of_another_size_is_size_mismatch() {
    let w = world(2);
    let out = on_each(&w, |c| {
        if c.rank() == 0 {
            c.send(&[1u8; 8], 1, 3).unwrap();
            c.send(&[2u8; 4], 1, 3).unwrap();
            None
        } else {
            let mut small = [0u8; 4];
            let e = c.recv(&mut small, 0, 3).unwrap_err();
            // The mismatched message was consumed: the next one arrives.
            let mut next = [0u8; 4];
            c.recv(&mut next, 0, 3).unwrap();
            assert_eq!(next, [2u8; 4]);
            Some(e)
        }
    });
    let e = out[1].clone().expect("rank 1's error");
    assert_eq!(e.status, Status::SizeMismatch);
    assert_eq!(e.op, "recv");
    assert_eq!(e.rank, Some(1));
    assert!(!e.message.is_empty());
    let text = e.to_string();
    assert!(
        text.starts_with("recv on rank 1 failed (NEXAR_ERR_SIZE_MISMATCH)"),
        "{}",
        text
    );
    assert!(text.contains(&e.message));
}

#[test]
fn invalid_ranks_are_refused_with_a_message() {
    let w = world(2);
    let c = &w[0];
    let e = c.send(&[1u8], 5, 0).unwrap_err();
    assert_eq!(e.status, Status::InvalidRank, "{}", e);
    assert!(
        e.message.contains("rank 5"),
        "nexar_last_error_message is carried: {}",
        e
    );
    assert_eq!(e.op, "send");
    let e = c.recv(&mut [0u8], 2, 0).unwrap_err();
    assert_eq!(e.status, Status::InvalidRank, "{}", e);
    let e = c.broadcast(&mut [0u8], 9).unwrap_err();
    assert_eq!(e.status, Status::InvalidRank, "{}", e);
    let e = c.rpc_call(7, 1, b"x").unwrap_err();
    assert_eq!(e.status, Status::InvalidRank, "{}", e);
    // The same through an asynchronous call refused at submission.
    let p = c.send_async(vec![1u8], 5, 0);
    assert!(p.is_complete());
    let e = p.wait().unwrap_err();
    assert_eq!(e.status, Status::InvalidRank);
    assert!(!e.message.is_empty());
}

#[test]
fn timeouts_name_the_operation() {
    let opts = options()
        .p2p_timeout(Duration::from_millis(300))
        .collective_timeout(Duration::from_millis(300));
    let w = world_with(2, &opts);
    let t = Instant::now();
    let e = w[0].recv(&mut [0u8; 4], 1, 42).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(30));
    assert_eq!(e.status, Status::Timeout, "{}", e);
    assert_eq!(e.op, "recv");
    assert!(
        e.message.contains("nexar_recv"),
        "nexar's message names the call: {}",
        e
    );
    assert!(
        e.to_string()
            .starts_with("recv on rank 0 failed (NEXAR_ERR_TIMEOUT)"),
        "{}",
        e
    );

    // Asynchronously: the message comes from the completion.
    let e = w[1].recv_async(vec![0u8; 4], 0, 43).wait().unwrap_err();
    assert_eq!(e.status, Status::Timeout, "{}", e);
    assert_eq!(e.op, "recv");
    assert_eq!(e.rank, Some(1));
    assert!(
        e.message.contains("nexar_recv"),
        "the completion's message: {}",
        e
    );
    assert_eq!(
        e.failed_rank,
        Some(0),
        "the completion names the silent rank"
    );

    // A collective that rank 1 never joins.
    let e = w[0].all_reduce(&mut [1.0f32; 4], Op::Sum).unwrap_err();
    assert_eq!(e.status, Status::Timeout, "{}", e);
    assert!(
        e.to_string()
            .starts_with("all_reduce on rank 0 failed (NEXAR_ERR_TIMEOUT)"),
        "{}",
        e
    );
    assert!(e.message.contains("allreduce"), "{}", e);
}

#[test]
fn rpc_timeout() {
    let opts = options().rpc_timeout(Duration::from_millis(300));
    let w = world_with(2, &opts);
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let rx = std::sync::Mutex::new(rx);
    // The handler outlasts the caller's timeout (bounded: 5 s at most).
    w[1].rpc_register(1, move |_, _| {
        let _ = rx.lock().unwrap().recv_timeout(Duration::from_secs(5));
        Ok(Vec::new())
    })
    .unwrap();
    let e = w[0].rpc_call(1, 1, b"slow").unwrap_err();
    tx.send(()).unwrap();
    assert_eq!(e.status, Status::Timeout, "{}", e);
    assert_eq!(e.op, "rpc_call");
}

#[test]
fn ranks_that_disagree_get_mismatch() {
    let w = world(2);
    let out = on_each(&w, |c| {
        let mut v = vec![1i32; 4 + c.rank() as usize];
        c.all_reduce(&mut v, Op::Sum).unwrap_err()
    });
    for e in out {
        assert_eq!(e.status, Status::Mismatch, "{}", e);
        assert!(!e.message.is_empty());
    }
}

#[test]
fn abort_fails_pending_and_later_operations() {
    let w = world(2);
    let pending = w[0].recv_async(vec![0u8; 16], 1, 5);
    w[0].abort().unwrap();
    let e = pending.wait().unwrap_err();
    assert_eq!(e.status, Status::Aborted, "{}", e);
    let e = w[0].barrier().unwrap_err();
    assert_eq!(e.status, Status::Aborted, "{}", e);
    // The peer hears of it: its operations fail instead of waiting.
    let e = w[1].barrier().unwrap_err();
    assert!(
        matches!(e.status, Status::Aborted | Status::PeerFailed),
        "rank 1: {}",
        e
    );
    assert!(
        w[1].async_error().is_some(),
        "the abort is reported in the background"
    );
}

#[test]
fn dropping_a_communicator_closes_its_pending_operations() {
    let mut w = world(2);
    let c1 = w.pop().unwrap();
    let pending = c1.recv_async(vec![0u64; 1024], 0, 1);
    let barrier = c1.barrier_async();
    drop(c1);
    let e = pending.wait().unwrap_err();
    assert_eq!(e.status, Status::Closed, "{}", e);
    assert_eq!(barrier.wait().unwrap_err().status, Status::Closed);
}

/// A failed `*_async` operation gives its caller's buffer back in the error,
/// the very allocation (same address, length and contents), whether it failed
/// in nexar after starting, was refused by nexar, or was refused by the
/// binding; a blocking call's error holds none.
#[test]
fn failed_async_operations_give_their_buffers_back() {
    let opts = options().p2p_timeout(Duration::from_millis(300));
    let w = world_with(2, &opts);

    // Failed after nexar took it: a receive nobody sends to times out.
    let buf: Vec<u32> = (0..1000).collect();
    let addr = buf.as_ptr();
    let mut e = w[1].recv_async(buf, 0, 77).wait().unwrap_err();
    assert_eq!(e.status, Status::Timeout, "{}", e);
    assert!(!e.buffer.is_empty());
    assert_eq!(
        e.buffer.take::<Vec<f32>>(),
        None,
        "another type is not taken"
    );
    let back: Vec<u32> = e.buffer.take().expect("the receive's buffer comes back");
    assert_eq!(back.as_ptr(), addr, "the same allocation, not a copy");
    assert_eq!(
        back,
        (0..1000).collect::<Vec<u32>>(),
        "nothing was received into it"
    );
    assert!(e.buffer.is_empty());
    assert_eq!(e.buffer.take::<Vec<u32>>(), None, "taken once");

    // Refused by nexar at submission (no such rank).
    let buf = vec![7u8; 64];
    let addr = buf.as_ptr();
    let mut e = w[0].send_async(buf, 5, 0).wait().unwrap_err();
    assert_eq!(e.status, Status::InvalidRank, "{}", e);
    let back: Vec<u8> = e.buffer.take().expect("a refused send's buffer comes back");
    assert_eq!((back.as_ptr(), back.len()), (addr, 64));

    // Refused by the binding: 3 elements do not split into 2 blocks. The
    // send buffer of an operation with a separate output comes back.
    let mut e = w[0]
        .reduce_scatter_async(vec![1.5f64; 3], Op::Sum)
        .wait()
        .unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument, "{}", e);
    assert_eq!(e.buffer.take::<Vec<f64>>(), Some(vec![1.5f64; 3]));

    // An RPC call gives its request back.
    let mut e = w[0]
        .rpc_call_async(9, 1, b"req".to_vec())
        .wait()
        .unwrap_err();
    assert_eq!(e.status, Status::InvalidRank, "{}", e);
    assert_eq!(e.buffer.take::<Vec<u8>>(), Some(b"req".to_vec()));

    // A clone holds no buffer and still compares equal; blocking calls hold none.
    let mut e = w[0].send_async(vec![1i64; 8], 5, 0).wait().unwrap_err();
    let copy = e.clone();
    assert!(copy.buffer.is_empty());
    assert_eq!(copy, e);
    assert_eq!(e.buffer.take::<Vec<i64>>(), Some(vec![1i64; 8]));
    let e = w[0].send(&[1u8], 5, 0).unwrap_err();
    assert!(e.buffer.is_empty());
}

#[test]
fn status_codes_and_display() {
    assert_eq!(Status::from_code(-4), Status::Timeout);
    assert_eq!(Status::Timeout.code(), -4);
    assert_eq!(Status::RpcFailed.code(), -19);
    assert_eq!(Status::from_code(-1000), Status::Unknown(-1000));
    assert_eq!(Status::Unknown(-1000).code(), -1000);
    for code in 0..=21 {
        let s = Status::from_code(-code);
        assert!(!matches!(s, Status::Unknown(_)), "code {}", -code);
        assert_eq!(s.code(), -code);
        assert!(
            s.describe().contains(s.name()),
            "{} vs {}",
            s.describe(),
            s.name()
        );
    }
    let e = Error {
        status: Status::Timeout,
        failed_rank: Some(2),
        message: "no answer".into(),
        op: "all_reduce",
        rank: Some(0),
        buffer: Default::default(),
    };
    assert_eq!(
        e.to_string(),
        "all_reduce on rank 0 failed (NEXAR_ERR_TIMEOUT) [failed rank 2]: no answer"
    );
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(e);
    assert!(boxed.to_string().contains("no answer"));
}

#[test]
fn communicator_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Communicator>();
    check::<libnexar::Pending<Vec<f32>>>();
    check::<libnexar::Options>();
    check::<libnexar::Seed>();
}

/// Set in the child process `init_from_env_without_a_cluster_is_not_found`
/// runs itself in.
const CLEAN_ENV_CHILD: &str = "LIBNEXAR_TEST_CLEAN_ENV_CHILD";

#[test]
fn init_from_env_without_a_cluster_is_not_found() {
    const NAME: &str = "init_from_env_without_a_cluster_is_not_found";
    if std::env::var_os(CLEAN_ENV_CHILD).is_some() {
        // The child: an environment that describes no cluster.
        let e = Communicator::init_from_env().unwrap_err();
        assert_eq!(e.status, Status::NotFound, "{}", e);
        assert_eq!(e.op, "init_from_env");
        assert!(
            e.message.contains("NEXAR_SEED"),
            "the message lists what was looked for: {}",
            e
        );
        return;
    }
    // This process may run inside a cluster (NEXAR_SEED, torchrun, Slurm...),
    // and its environment must not be changed while other tests run: the test
    // runs again, alone, in a child whose environment is cleared but for the
    // library search path.
    let mut child = Command::new(std::env::current_exe().expect("the test binary"));
    child
        .args([NAME, "--exact", "--test-threads=1", "--nocapture"])
        .env_clear()
        .env(CLEAN_ENV_CHILD, "1");
    for var in ["LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH"] {
        if let Some(v) = std::env::var_os(var) {
            child.env(var, v);
        }
    }
    let out = child.output().expect("run the test binary again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the child failed ({}):\n{}\n{}",
        out.status,
        stdout,
        stderr
    );
    // A filter that matched nothing would succeed too.
    assert!(
        stdout.contains("1 passed"),
        "the child did not run the test:\n{}\n{}",
        stdout,
        stderr
    );
}

/// A blocking call's error names the rank that failed it, from the call
/// itself: rank 0's first background error names rank 3 (dropped first),
/// while its receive fails because rank 2 aborts.
#[test]
fn blocking_errors_name_the_rank_that_failed_the_call() {
    let mut w = world(4);
    drop(w.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    let background = loop {
        if let Some(e) = w[0].async_error() {
            break e;
        }
        assert!(Instant::now() < deadline, "rank 0 never heard of rank 3");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(background.failed_rank, Some(3), "{}", background);
    let e = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            w[2].abort().unwrap();
        });
        w[0].recv(&mut [0u8; 8], 2, 1).unwrap_err()
    });
    assert_eq!(e.status, Status::Aborted, "{}", e);
    assert_eq!(e.failed_rank, Some(2), "{}", e);
    assert!(e.to_string().contains("[failed rank 2]"), "{}", e);
}

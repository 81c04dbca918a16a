//! RPC: handlers as closures, errors and panics, (un)registration, async calls.

mod common;

use common::world;
use libnexar::{block_on, Communicator, Status};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

fn reverse(src: u32, req: &[u8]) -> libnexar::RpcResult {
    let mut out: Vec<u8> = req.iter().rev().cloned().collect();
    out.push(src as u8);
    Ok(out)
}

#[test]
fn register_call_replace_unregister() {
    let w = world(3);
    w[1].rpc_register(42, reverse).unwrap();
    // Rank 0 and rank 2 call rank 1; the handler sees who called.
    assert_eq!(w[0].rpc_call(1, 42, b"abc").unwrap(), b"cba\x00");
    assert_eq!(w[2].rpc_call(1, 42, b"xy").unwrap(), b"yx\x02");
    // A rank calling itself.
    assert_eq!(w[1].rpc_call(1, 42, b"q").unwrap(), b"q\x01");
    // Empty request, empty response.
    w[1].rpc_register(43, |_, req| {
        assert!(req.is_empty());
        Ok(Vec::new())
    })
    .unwrap();
    assert_eq!(w[0].rpc_call(1, 43, b"").unwrap(), Vec::<u8>::new());
    // Replacing a handler.
    w[1].rpc_register(42, |_, _| Ok(b"new".to_vec())).unwrap();
    assert_eq!(w[0].rpc_call(1, 42, b"abc").unwrap(), b"new");
    // Unregistering.
    w[1].rpc_unregister(42).unwrap();
    let e = w[0].rpc_call(1, 42, b"abc").unwrap_err();
    assert_eq!(e.status, Status::RpcNotRegistered, "{}", e);
    assert!(!e.message.is_empty());
    // Handlers belong to the rank that registered them.
    assert_eq!(
        w[0].rpc_call(2, 43, b"").unwrap_err().status,
        Status::RpcNotRegistered
    );
    w[1].rpc_unregister(12345).unwrap();
    assert!(w[1].stats().unwrap().rpc_requests_served >= 5);
}

#[test]
fn large_request_and_response() {
    let w = world(2);
    w[1].rpc_register(1, |_, req| {
        Ok(req.iter().map(|b| b.wrapping_mul(3)).collect())
    })
    .unwrap();
    let req: Vec<u8> = (0..1_500_000u32).map(|i| (i % 251) as u8).collect();
    let got = w[0].rpc_call(1, 1, &req).unwrap();
    assert_eq!(got.len(), req.len());
    assert!(got.iter().zip(&req).all(|(g, r)| *g == r.wrapping_mul(3)));
}

#[test]
fn handler_error_reaches_the_caller_with_its_message() {
    let w = world(2);
    w[1].rpc_register(7, |_, req| Err(format!("bad input {:?}", req)))
        .unwrap();
    let e = w[0].rpc_call(1, 7, b"zz").unwrap_err();
    assert_eq!(e.status, Status::RpcFailed, "{}", e);
    assert!(e.message.contains("bad input [122, 122]"), "{}", e);
    assert_eq!(e.op, "rpc_call");
    // Asynchronously too.
    let e = block_on(w[0].rpc_call_async(1, 7, b"a".to_vec())).unwrap_err();
    assert_eq!(e.status, Status::RpcFailed);
    assert!(e.message.contains("bad input [97]"), "{}", e);
}

#[test]
fn handler_panic_becomes_an_error_not_a_crash() {
    let w = world(2);
    w[1].rpc_register(9, |_, req| {
        if req == b"ok" {
            return Ok(b"fine".to_vec());
        }
        panic!("boom {}", req.len())
    })
    .unwrap();
    let e = w[0].rpc_call(1, 9, b"xyz").unwrap_err();
    assert_eq!(e.status, Status::RpcFailed, "{}", e);
    assert!(e.message.contains("panicked: boom 3"), "{}", e);
    // The serving rank (and its completion thread) survived.
    assert_eq!(w[0].rpc_call(1, 9, b"ok").unwrap(), b"fine");
    let b = w[0].barrier_async();
    w[1].barrier().unwrap();
    b.wait().unwrap();
}

#[test]
fn async_calls_outstanding_together() {
    let w = world(2);
    w[1].rpc_register(5, reverse).unwrap();
    let calls: Vec<_> = (0..50u8)
        .map(|i| w[0].rpc_call_async(1, 5, vec![i, i + 1]))
        .collect();
    for (i, call) in calls.into_iter().enumerate() {
        let i = i as u8;
        assert_eq!(block_on(call).unwrap(), vec![i + 1, i, 0]);
    }
    // Dropped before completion: the response is freed by the callback.
    for i in 0..20u8 {
        drop(w[0].rpc_call_async(1, 5, vec![i]));
    }
    assert_eq!(w[0].rpc_call(1, 5, b"end").unwrap(), b"dne\x00");
}

#[test]
fn blocking_inside_a_handler_is_would_deadlock() {
    let w: Vec<Arc<Communicator>> = world(2).into_iter().map(Arc::new).collect();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let me = Arc::downgrade(&w[1]);
    let log = seen.clone();
    w[1].rpc_register(3, move |_, _| {
        let comm = me.upgrade().ok_or("gone")?;
        // A blocking nexar call from the completion thread.
        let e = comm.barrier().unwrap_err();
        log.lock().unwrap().push(e.status.name().to_string());
        // Waiting on a future that this thread would have to complete.
        let never = comm.recv_async(vec![0u8; 1], 0, 999);
        let e = never.wait().unwrap_err();
        log.lock().unwrap().push(e.status.name().to_string());
        // Starting asynchronous operations is fine.
        Ok(b"done".to_vec())
    })
    .unwrap();
    assert_eq!(w[0].rpc_call(1, 3, b"").unwrap(), b"done");
    assert_eq!(
        *seen.lock().unwrap(),
        vec!["NEXAR_ERR_WOULD_DEADLOCK", "NEXAR_ERR_WOULD_DEADLOCK"]
    );
}

#[test]
fn a_handler_may_call_another_rank_asynchronously() {
    // Rank 1's handler forwards to rank 2 without blocking: it starts the
    // call and answers at once with what it knows.
    let w: Vec<Arc<Communicator>> = world(3).into_iter().map(Arc::new).collect();
    w[2].rpc_register(2, |_, req| Ok([req, b"@2"].concat()))
        .unwrap();
    let forwarded: Arc<Mutex<Vec<libnexar::Pending<Vec<u8>>>>> = Arc::default();
    let me = Arc::downgrade(&w[1]);
    let keep = forwarded.clone();
    w[1].rpc_register(1, move |_, req| {
        let comm = me.upgrade().ok_or("gone")?;
        keep.lock()
            .unwrap()
            .push(comm.rpc_call_async(2, 2, req.to_vec()));
        Ok(b"started".to_vec())
    })
    .unwrap();
    assert_eq!(w[0].rpc_call(1, 1, b"hi").unwrap(), b"started");
    let p = forwarded
        .lock()
        .unwrap()
        .pop()
        .expect("the handler started a call");
    assert_eq!(p.wait().unwrap(), b"hi@2");
}

#[test]
fn handlers_are_dropped_when_replaced_and_with_the_communicator() {
    struct Token(Arc<AtomicUsize>);
    impl Drop for Token {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let dropped = Arc::new(AtomicUsize::new(0));
    let mut w = world(2);
    let t1 = Token(dropped.clone());
    w[1].rpc_register(1, move |_, _| {
        let _ = &t1;
        Ok(Vec::new())
    })
    .unwrap();
    let t2 = Token(dropped.clone());
    w[1].rpc_register(2, move |_, _| {
        let _ = &t2;
        Ok(Vec::new())
    })
    .unwrap();
    assert_eq!(dropped.load(Ordering::SeqCst), 0);
    w[1].rpc_register(1, |_, _| Ok(Vec::new())).unwrap();
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        1,
        "the replaced closure is dropped"
    );
    let c1 = w.pop().unwrap();
    drop(c1);
    assert_eq!(
        dropped.load(Ordering::SeqCst),
        2,
        "the rest go with the communicator"
    );
}

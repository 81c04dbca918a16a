//! Failures: a rank that aborts is seen by the others; revoke reaches every
//! member; agree is uniform; shrink gives the survivors a working communicator.

mod common;

use common::{on_each, world};
use libnexar::{Op, Status};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn wait_until(mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(30);
    while !cond() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
    }
    cond()
}

#[test]
fn revoke_reaches_every_member_and_agree_still_works() {
    let w = world(3);
    w[0].revoke().unwrap();
    for c in &w {
        assert!(wait_until(|| c.is_revoked()));
    }
    assert_eq!(w[1].barrier().unwrap_err().status, Status::Revoked);
    assert_eq!(on_each(&w, |c| c.agree(0b111).unwrap()), vec![0b111; 3]);
}

#[test]
fn agree_and_shrink_after_a_rank_aborts() {
    let w = world(4);
    w[3].abort().unwrap();
    let survivors = &w[..3];
    for c in survivors {
        assert!(
            wait_until(|| c.failed().unwrap() == vec![3]),
            "{:?}",
            c.failed()
        );
    }
    // After a peer's abort, operations fail naming it; agree and shrink work.
    let e = survivors[1].barrier().unwrap_err();
    assert_eq!((e.status, e.failed_rank), (Status::Aborted, Some(3)));
    // Not acknowledged: the same error and the same flags everywhere.
    let out = on_each(survivors, |c| c.agree_with_status(0b111 ^ c.rank() as u64));
    for (flags, st) in &out {
        assert_eq!(*flags, 0b100);
        assert_eq!(st.as_ref().unwrap_err().status, Status::PeerFailed);
    }
    for c in survivors {
        assert_eq!(c.ack_failed(1).unwrap(), 1);
    }
    let out = on_each(survivors, |c| c.agree(0b110).unwrap());
    assert_eq!(out, vec![0b110; 3]);
    let shrunk = on_each(survivors, |c| c.shrink().unwrap());
    for (i, s) in shrunk.iter().enumerate() {
        assert_eq!((s.rank(), s.size()), (i as u32, 3));
    }
    let sums = on_each(&shrunk, |s| {
        let mut buf = [s.rank() as i64 + 1, 10];
        s.all_reduce(&mut buf, Op::Sum).unwrap();
        buf
    });
    assert_eq!(sums, vec![[6, 30]; 3]);
}

/// Failure callback calls: (survivor, failed rank, cause), from nexar's threads.
type Events = Arc<Mutex<Vec<(u32, u32, Status)>>>;

fn recorder(events: &Events, survivor: u32) -> impl Fn(u32, Status) + Send + Sync + 'static {
    let events = Arc::clone(events);
    move |rank, cause| events.lock().unwrap().push((survivor, rank, cause))
}

#[test]
fn failure_callback_names_the_aborted_rank_once_per_survivor() {
    let w = world(4);
    let replaced: Events = Default::default();
    let current: Events = Default::default();
    for c in &w {
        // Replaced before anything fails: only the second one may be called.
        c.set_failure_callback(recorder(&replaced, c.rank()))
            .unwrap();
        c.set_failure_callback(recorder(&current, c.rank()))
            .unwrap();
    }
    // The replaced closures were dropped: only the test holds their Arc now.
    assert_eq!(Arc::strong_count(&replaced), 1);
    w[3].abort().unwrap();
    assert!(wait_until(|| current.lock().unwrap().len() >= 3));
    let mut got = current.lock().unwrap().clone();
    got.sort_by_key(|e| e.0);
    assert_eq!(
        got,
        vec![
            (0, 3, Status::Aborted),
            (1, 3, Status::Aborted),
            (2, 3, Status::Aborted)
        ]
    );
    assert!(replaced.lock().unwrap().is_empty());
    drop(w);
    // Dropping the communicators dropped their closures.
    assert_eq!(Arc::strong_count(&current), 1);
}

#[test]
fn failure_callback_cleared_and_one_that_panics_does_not_unwind_into_nexar() {
    let w = world(3);
    let cleared: Events = Default::default();
    w[0].set_failure_callback(recorder(&cleared, 0)).unwrap();
    w[0].clear_failure_callback().unwrap();
    assert_eq!(Arc::strong_count(&cleared), 1);
    let panicked: Events = Default::default();
    let seen = Arc::clone(&panicked);
    w[1].set_failure_callback(move |rank, cause| {
        seen.lock().unwrap().push((1, rank, cause));
        panic!("a failure callback that panics");
    })
    .unwrap();
    let mut w = w;
    // A member that is dropped normally is a failed member ("left").
    drop(w.pop());
    assert!(wait_until(|| w[0].failed().unwrap() == vec![2]));
    assert!(wait_until(|| panicked.lock().unwrap().len() == 1));
    assert_eq!(*panicked.lock().unwrap(), vec![(1, 2, Status::PeerFailed)]);
    assert!(cleared.lock().unwrap().is_empty());
    // The engine that ran the panicking callback still works.
    let sums = on_each(&w, |c| {
        let mut buf = [c.rank() as i64 + 1];
        c.all_reduce(&mut buf, Op::Sum).map(|_| buf[0])
    });
    assert!(sums.iter().all(|s| s.is_err()), "{sums:?}");
    let flags = on_each(&w, |c| {
        let _ = c.ack_failed(1);
        c.agree(0b11).unwrap()
    });
    assert_eq!(flags, vec![0b11; 2]);
    // Not again for rank 0 when the world is dropped.
    w[1].clear_failure_callback().unwrap();
}

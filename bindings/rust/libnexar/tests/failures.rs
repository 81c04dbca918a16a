//! Failures: a rank that aborts is seen by the others; revoke reaches every
//! member; agree is uniform; shrink gives the survivors a working communicator.

mod common;

use common::{on_each, world};
use libnexar::{Op, Status};
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

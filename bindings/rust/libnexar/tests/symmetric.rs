//! Symmetric memory (`mem_alloc`): a large broadcast and an allreduce out of
//! it are exact between same-host ranks (where it travels by reference).

mod common;

use common::{on_each, world};
use libnexar::Op;

#[test]
fn symmetric_buffers_carry_collectives() {
    let w = world(2);
    const N: usize = 1 << 18; // 1 MiB of f32
    let out = on_each(&w, |c| {
        let mut buf = c.mem_alloc::<f32>(N).expect("mem_alloc");
        assert!(buf.iter().all(|&x| x == 0.0));
        if c.rank() == 1 {
            for (i, x) in buf.iter_mut().enumerate() {
                *x = (i % 1000) as f32 + 0.5;
            }
        }
        c.broadcast(&mut buf, 1).expect("broadcast");
        let bcast_ok = buf.iter().enumerate().all(|(i, &x)| x == (i % 1000) as f32 + 0.5);
        c.all_reduce(&mut buf, Op::Sum).expect("all_reduce");
        let sum_ok = buf.iter().enumerate().all(|(i, &x)| x == 2.0 * ((i % 1000) as f32 + 0.5));
        (bcast_ok, sum_ok)
    });
    for (rank, (b, s)) in out.into_iter().enumerate() {
        assert!(b, "rank {rank}: broadcast out of symmetric memory");
        assert!(s, "rank {rank}: allreduce in symmetric memory");
    }
}

#[test]
fn zero_elements_are_refused() {
    let w = world(1);
    let err = w[0].mem_alloc::<f32>(0).err().expect("0 elements accepted");
    assert_eq!(err.status, libnexar::Status::InvalidArgument);
}

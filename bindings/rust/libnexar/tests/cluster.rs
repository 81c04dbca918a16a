//! Split, stats, options (topology), joining through a seed, log lines.

mod common;

use common::{on_each, options, world, world_with, BOUND};
use libnexar::{Communicator, LogLevel, Op, Options, Seed, SeedOptions, Shm, Status, Topology};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[test]
fn split_by_color_ordered_by_key() {
    let w = world(3);
    let out = on_each(&w, |c| {
        let r = c.rank();
        // colors: ranks 0 and 2 -> 0, rank 1 -> 1; keys reverse the order.
        let sub = c.split(r % 2, 10 - r).unwrap();
        let mut v = vec![r as i32 + 1];
        sub.all_reduce(&mut v, Op::Sum).unwrap();
        let mut who = vec![0u32; sub.size() as usize];
        sub.all_gather(&[r], &mut who).unwrap();
        (sub.rank(), sub.size(), v[0], who)
    });
    assert_eq!(
        out[0],
        (1, 2, 4, vec![2, 0]),
        "rank 0 (key 10) comes after rank 2 (key 8)"
    );
    assert_eq!(out[2], (0, 2, 4, vec![2, 0]));
    assert_eq!(out[1], (0, 1, 2, vec![1]));
}

#[test]
fn split_of_two_and_the_parent_still_works() {
    let w = world(2);
    let out = on_each(&w, |c| {
        let sub = c.split(7, 0).unwrap();
        let mut v = vec![c.rank() as u8 + 1];
        sub.all_reduce(&mut v, Op::Max).unwrap();
        let mut p = vec![c.rank() as u8 + 1];
        c.all_reduce(&mut p, Op::Sum).unwrap();
        drop(sub);
        c.barrier().unwrap();
        (v[0], p[0])
    });
    assert_eq!(out, vec![(2, 3), (2, 3)]);
}

#[test]
fn split_async_by_color_ordered_by_key() {
    let w = world(3);
    let out = on_each(&w, |c| {
        let r = c.rank();
        // As split_by_color_ordered_by_key; rank 1 splits blocking (the two mix).
        let sub = if r == 1 {
            c.split(r % 2, 10 - r).unwrap()
        } else {
            c.split_async(r % 2, 10 - r).wait().unwrap()
        };
        let mut v = vec![r as i32 + 1];
        sub.all_reduce(&mut v, Op::Sum).unwrap();
        let mut who = vec![0u32; sub.size() as usize];
        sub.all_gather(&[r], &mut who).unwrap();
        (sub.rank(), sub.size(), v[0], who)
    });
    assert_eq!(out[0], (1, 2, 4, vec![2, 0]));
    assert_eq!(out[2], (0, 2, 4, vec![2, 0]));
    assert_eq!(out[1], (0, 1, 2, vec![1]));
}

#[test]
fn split_async_from_one_thread_and_dropped_early() {
    let w = world(2);
    // Nothing blocks while submitting: one thread starts the split on both ranks.
    let pending: Vec<_> = w.iter().map(|c| c.split_async(3, 0)).collect();
    assert_eq!(pending[0].op(), "split");
    let subs: Vec<Communicator> = pending.into_iter().map(|p| p.wait().unwrap()).collect();
    assert_eq!((subs[0].rank(), subs[1].rank()), (0, 1));
    assert_eq!((subs[0].size(), subs[1].size()), (2, 2));
    let sums = on_each(&subs, |sub| {
        let mut v = vec![sub.rank() as u64 + 1; 3];
        sub.all_reduce(&mut v, Op::Sum).unwrap();
        v
    });
    assert_eq!(sums, vec![vec![3; 3], vec![3; 3]]);

    // Futures dropped before completion: the communicators made after that
    // are destroyed; the parent goes on.
    drop(w.iter().map(|c| c.split_async(4, 0)).collect::<Vec<_>>());
    let out = on_each(&w, |c| {
        let mut v = vec![c.rank() + 1];
        c.all_reduce(&mut v, Op::Sum).unwrap();
        c.barrier().unwrap();
        v[0]
    });
    assert_eq!(out, vec![3, 3]);
    drop(subs);
}

#[test]
fn stats_count_traffic() {
    let w = world_with(2, &options().shm(Shm::Off)); // every byte over QUIC
    let before = w[0].stats().unwrap();
    assert_eq!(before.connections, 1);
    on_each(&w, |c| {
        if c.rank() == 0 {
            c.send(&vec![7u8; 100_000], 1, 1).unwrap();
        } else {
            c.recv(&mut vec![0u8; 100_000], 0, 1).unwrap();
        }
    });
    let after = w[0].stats().unwrap();
    assert!(
        after.bytes_sent >= before.bytes_sent + 100_000,
        "{:?} -> {:?}",
        before,
        after
    );
    assert!(after.messages_sent > before.messages_sent);
    assert!(w[1].stats().unwrap().bytes_received >= 100_000);
    if after.packets_fast_aead > 0 {
        // ipsec-mb in use (CI installs it): the payload was sealed from its buffer.
        assert!(
            after.bytes_sealed_in_place >= before.bytes_sealed_in_place + 50_000,
            "{:?} -> {:?}",
            before,
            after
        );
    }
}

#[test]
fn sparse_topologies_hold_few_links_and_stay_exact() {
    let cases: Vec<(Options, u32, Vec<u64>)> = vec![
        (options().topology(Topology::Hypercube), 8, vec![3; 8]),
        (options().topology(Topology::KRegular(4)), 6, vec![4; 6]),
        (
            options().topology_edges(&[(0, 1), (1, 2), (2, 3)]),
            4,
            vec![1, 2, 2, 1],
        ),
    ];
    for (opts, n, links) in cases {
        let w = world_with(n, &opts);
        for c in &w {
            assert_eq!(
                c.stats().unwrap().connections,
                links[c.rank() as usize],
                "rank {}",
                c.rank()
            );
        }
        let out = on_each(&w, |c| {
            let mut v = vec![c.rank() + 1; 5];
            c.all_reduce(&mut v, Op::Sum).unwrap();
            v
        });
        for v in out {
            assert_eq!(v, vec![n * (n + 1) / 2; 5]);
        }
    }
    let split = options().topology_edges(&[(0, 1), (2, 3)]);
    let err = Communicator::bootstrap_local_with(4, &split)
        .err()
        .expect("a disconnected graph");
    assert!(err.to_string().contains("not connected"), "{err}");
}

#[test]
fn ring_topology_connects_neighbours_only() {
    let opts = options().topology(Topology::Ring);
    let w = world_with(4, &opts);
    for c in &w {
        assert_eq!(c.stats().unwrap().connections, 2, "rank {}", c.rank());
    }
    let out = on_each(&w, |c| {
        let mut v = vec![c.rank() + 1; 3];
        c.all_reduce(&mut v, Op::Sum).unwrap();
        // Rank 0 to rank 2 is relayed.
        if c.rank() == 0 {
            c.send(&[42u32], 2, 9).unwrap();
        } else if c.rank() == 2 {
            let mut m = [0u32];
            c.recv(&mut m, 0, 9).unwrap();
            assert_eq!(m, [42]);
        }
        v
    });
    for v in out {
        assert_eq!(v, vec![10; 3]);
    }
    assert!(
        w[1].stats().unwrap().relay_bytes_forwarded + w[3].stats().unwrap().relay_bytes_forwarded
            > 0
    );
    let full = world(4);
    assert_eq!(full[0].stats().unwrap().connections, 3);
}

#[test]
fn options_refuse_nul_bytes() {
    let opts = options().seed_address("bad\0address");
    let e = Communicator::join(&opts).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("NUL"), "{}", e);
}

#[test]
fn join_through_a_seed_and_log_lines() {
    // Log lines: process-wide, so this is the only test here that logs.
    let lines: Arc<Mutex<Vec<(LogLevel, String)>>> = Arc::default();
    let sink = lines.clone();
    libnexar::set_log_handler(move |level, line| {
        sink.lock().unwrap().push((level, line.to_string()));
    })
    .unwrap();

    let seed = Seed::start(
        &SeedOptions::new(2)
            .unwrap()
            .cluster_token("rust-token")
            .formation_timeout(BOUND),
    )
    .unwrap();
    assert!(
        seed.address().starts_with("127.0.0.1:"),
        "{}",
        seed.address()
    );
    assert!(
        seed.wait(Duration::from_millis(1)).is_none(),
        "still forming"
    );
    let addr = seed.address().to_string();
    let joined: Vec<Communicator> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2u32)
            .map(|r| {
                let addr = addr.clone();
                s.spawn(move || {
                    let opts = options()
                        .seed_address(&addr)
                        .cluster_token("rust-token")
                        .rank(Some(r))
                        .world_size(2);
                    Communicator::join(&opts).unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(seed.wait(BOUND).expect("formation ended"), Ok(()));
    assert_eq!((joined[0].rank(), joined[1].rank()), (0, 1));
    let out = on_each(&joined, |c| {
        let mut v = vec![c.rank() as f64 + 0.5];
        c.all_reduce(&mut v, Op::Sum).unwrap();
        v[0]
    });
    assert_eq!(out, vec![2.0, 2.0]);

    // A wrong token is refused.
    let seed2 = Seed::start(
        &SeedOptions::new(1)
            .unwrap()
            .cluster_token("right")
            .formation_timeout(Duration::from_secs(20)),
    )
    .unwrap();
    let opts = options()
        .seed_address(seed2.address())
        .cluster_token("wrong")
        .world_size(1)
        .connect_timeout(Duration::from_secs(20));
    let e = Communicator::join(&opts).unwrap_err();
    assert_eq!(e.status, Status::Auth, "{}", e);
    assert_eq!(e.op, "join");
    drop(seed2);

    // An open seed logs a warning through the handler.
    let open = Seed::start(&SeedOptions::new(1).unwrap().open(true)).unwrap();
    drop(open);
    libnexar::clear_log_handler().unwrap();
    let got = lines.lock().unwrap().clone();
    assert!(
        got.iter()
            .any(|(level, l)| *level == LogLevel::Warn && l.contains("runs open")),
        "log lines: {:?}",
        got
    );
}

/// Ranks in one process share a host: payloads go through shared memory,
/// with the same results as over QUIC.
#[test]
fn same_host_ranks_share_memory() {
    let mut sums = Vec::new();
    for mode in [Shm::Auto, Shm::Off] {
        let w = world_with(3, &options().shm(mode));
        let out = on_each(&w, |c| {
            let r = c.rank() as usize;
            let mut buf: Vec<f32> = (0..100_003usize)
                .map(|i| (r * 1000 + 1) as f32 / (1 + (i * 7 + r * 13) % 1001) as f32)
                .collect();
            c.all_reduce(&mut buf, Op::Sum).unwrap();
            buf
        });
        let s = w[0].stats().unwrap();
        if mode == Shm::Auto {
            assert_eq!(s.shm_pairs, 2, "{:?}", s);
            // The allreduce read the peers' shared memory: nothing over QUIC.
            assert_eq!(s.shm_collectives, 1, "{:?}", s);
            assert!(s.bytes_sent < 100_000, "{:?}", s);
        } else {
            assert_eq!((s.shm_pairs, s.shm_bytes_sent, s.shm_collectives), (0, 0, 0), "{:?}", s);
        }
        sums.push(out[1].iter().map(|x| x.to_bits()).collect::<Vec<u32>>());
    }
    assert!(sums[0] == sums[1], "shared memory and QUIC results differ");
    let too_small = options().shm_max_bytes(1 << 20).shm(Shm::Require);
    assert!(Communicator::bootstrap_local_with(2, &too_small).is_err());
}

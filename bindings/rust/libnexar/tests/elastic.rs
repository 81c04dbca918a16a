//! Elastic membership: a world formed through an elastic seed grows.

mod common;

use common::{on_each, options, BOUND};
use libnexar::{Communicator, Op, Seed, SeedOptions};
use std::time::Duration;

#[test]
fn grow_admits_a_joiner_with_the_next_rank() {
    let seed = Seed::start(
        &SeedOptions::new(2)
            .unwrap()
            .cluster_token("rust-elastic")
            .formation_timeout(BOUND)
            .elastic(true),
    )
    .unwrap();
    let addr = seed.address().to_string();
    let join = |rank: Option<u32>| {
        let opts = options()
            .seed_address(&addr)
            .cluster_token("rust-elastic")
            .elastic(true)
            .join_timeout(BOUND)
            .rank(rank);
        Communicator::join(&opts).unwrap()
    };
    let members: Vec<Communicator> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2u32).map(|r| s.spawn(move || join(Some(r)))).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let (grown, joiner) = std::thread::scope(|s| {
        let j = s.spawn(|| join(None));
        for c in &members {
            while c.pending_joins().unwrap() < 1 {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let grown = on_each(&members, |c| c.grow(1).unwrap());
        (grown, j.join().unwrap())
    });
    let all = vec![&grown[0], &grown[1], &joiner];
    for (r, c) in all.iter().enumerate() {
        assert_eq!((c.rank(), c.size()), (r as u32, 3));
    }
    let sums: Vec<f64> = std::thread::scope(|s| {
        let hs: Vec<_> = all
            .iter()
            .map(|c| {
                s.spawn(move || {
                    let mut v = vec![c.rank() as f64 + 1.0];
                    c.all_reduce(&mut v, Op::Sum).unwrap();
                    v[0]
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(sums, vec![6.0, 6.0, 6.0]);
}

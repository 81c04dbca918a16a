//! Shared by the integration tests: worlds with bounded waits, one thread per rank.
#![allow(dead_code)]

use libnexar::{Communicator, Options};
use std::panic::resume_unwind;
use std::thread;
use std::time::Duration;

/// Every wait in the tests is bounded by this (nexar's own timeouts).
pub const BOUND: Duration = Duration::from_secs(60);

/// Options whose every timeout is BOUND.
pub fn options() -> Options {
    Options::new()
        .expect("nexar_comm_options_init")
        .timeouts(BOUND)
        .connect_timeout(BOUND)
}

/// An in-process world of n ranks (real QUIC over loopback).
pub fn world(n: u32) -> Vec<Communicator> {
    world_with(n, &options())
}

pub fn world_with(n: u32, opts: &Options) -> Vec<Communicator> {
    let w = Communicator::bootstrap_local_with(n, opts).expect("bootstrap_local");
    assert_eq!(w.len(), n as usize);
    for (i, c) in w.iter().enumerate() {
        assert_eq!(c.rank(), i as u32);
        assert_eq!(c.size(), n);
    }
    w
}

/// Runs f on every rank at once, one scoped thread each; returns the results
/// in rank order and re-raises the first panic.
pub fn on_each<R, F>(world: &[Communicator], f: F) -> Vec<R>
where
    R: Send,
    F: Fn(&Communicator) -> R + Sync,
{
    let f = &f;
    thread::scope(|s| {
        let handles: Vec<_> = world.iter().map(|c| s.spawn(move || f(c))).collect();
        let results: Vec<thread::Result<R>> = handles.into_iter().map(|h| h.join()).collect();
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|p| resume_unwind(p)))
            .collect()
    })
}

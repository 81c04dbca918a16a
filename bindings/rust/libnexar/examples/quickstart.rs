//! A world of four ranks inside this process: a blocking all_reduce on one
//! thread per rank, asynchronous operations driven from one thread, and an
//! RPC. Run: cargo run --example quickstart (see docs/rust.md).

use libnexar::{block_on, Communicator, Op, Options};
use std::time::Duration;

fn main() -> libnexar::Result<()> {
    println!("libnexar {}", libnexar::version());
    let opts = Options::new()?.timeouts(Duration::from_secs(30));
    let world = Communicator::bootstrap_local_with(4, &opts)?;

    // Blocking: one thread per rank.
    std::thread::scope(|s| {
        for comm in &world {
            s.spawn(move || {
                let mut v = vec![comm.rank() as f32; 3];
                comm.all_reduce(&mut v, Op::Sum).expect("all_reduce");
                println!("rank {}: all_reduce -> {:?}", comm.rank(), v);
            });
        }
    });

    // Asynchronous: the futures own their buffers; nothing blocks until block_on.
    let pending: Vec<_> = world
        .iter()
        .map(|c| c.all_gather_async(vec![c.rank() * 10]))
        .collect();
    for (rank, p) in pending.into_iter().enumerate() {
        println!("rank {}: all_gather -> {:?}", rank, block_on(p)?);
    }

    // RPC: rank 3 serves fn 1; rank 0 calls it.
    world[3].rpc_register(1, |src, req| {
        Ok(format!(
            "rank 3 got {:?} from rank {}",
            String::from_utf8_lossy(req),
            src
        )
        .into_bytes())
    })?;
    let answer = world[0].rpc_call(3, 1, b"hello")?;
    println!("{}", String::from_utf8_lossy(&answer));
    println!("rank 0 stats: {:?}", world[0].stats()?);
    Ok(())
}

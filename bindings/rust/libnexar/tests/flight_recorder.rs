//! The flight recorder's dump lists the collective that ran.

mod common;

use common::world;
use libnexar::Op;

#[test]
fn dump_lists_the_collective() {
    let w = world(1);
    let mut v = vec![1.0f64, 2.0];
    w[0].all_reduce(&mut v, Op::Sum).unwrap();
    let path = std::env::temp_dir().join(format!("nexar-fr-rust-{}.json", std::process::id()));
    w[0].flight_recorder_dump(Some(&path)).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(text.starts_with("{\"nexar_flight_recorder\":1"), "{text}");
    assert!(text.contains("\"op\":\"allreduce\""), "{text}");
    assert!(text.contains("\"coll_seq\":1,"), "{text}");
    assert!(text.contains("\"count\":2,"), "{text}");
    assert!(text.contains("\"state\":\"completed\""), "{text}");
}

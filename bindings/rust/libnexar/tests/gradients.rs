//! The bucketed allreduce against one all_reduce per slice, TopK and
//! RandomK sums with their exact expected values, and mismatched
//! compressors.

mod common;

use common::{on_each, world};
use libnexar::{CompressKind, Compressor, Op, Status};

#[test]
fn bucketed_equals_one_all_reduce_per_slice() {
    let w = world(3);
    let sizes = [0usize, 9, 70_000, 3, 300_001, 5];
    on_each(&w, |c| {
        let r = c.rank() as i64;
        let mut mine: Vec<Vec<i64>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n as i64).map(|j| j * (r + 1) + i as i64).collect())
            .collect();
        let mut reference = mine.clone();
        for v in reference.iter_mut() {
            c.all_reduce(v, Op::Sum).unwrap();
        }
        let mut slices: Vec<&mut [i64]> = mine.iter_mut().map(|v| v.as_mut_slice()).collect();
        c.all_reduce_bucketed(&mut slices, Op::Sum, 1 << 20)
            .unwrap();
        assert_eq!(mine, reference, "rank {}", r);
    });
}

#[test]
fn topk_sums_each_ranks_largest() {
    let w = world(2);
    const N: usize = 1000; // k = 10
    let input = |r: usize, i: usize| {
        ((i * 37 + r * 11) % 1009) as f32 * if i % 2 == 0 { 1.0 } else { -1.0 }
    };
    let got = on_each(&w, |c| {
        let r = c.rank() as usize;
        let mut z = Compressor::new::<f32>(CompressKind::TopK, 0.01, N, 0).unwrap();
        let send: Vec<f32> = (0..N).map(|i| input(r, i)).collect();
        let mut recv = vec![-1.0f32; N];
        c.all_reduce_compressed(&send, &mut recv, &mut z).unwrap();
        recv
    });
    let mut want = vec![0.0f32; N];
    for r in 0..2 {
        let mut order: Vec<usize> = (0..N).collect();
        order.sort_by(|&a, &b| {
            input(r, b)
                .abs()
                .partial_cmp(&input(r, a).abs())
                .unwrap()
                .then(a.cmp(&b))
        });
        for &i in &order[..10] {
            want[i] += input(r, i);
        }
    }
    assert_eq!(got[0], want);
    assert_eq!(got[1], want);
}

#[test]
fn randomk_same_positions_and_mismatch() {
    let w = world(2);
    const N: usize = 1000;
    let got = on_each(&w, |c| {
        let mut z = Compressor::new::<f64>(CompressKind::RandomK, 0.05, N, 3).unwrap();
        let send = vec![c.rank() as f64 + 1.0; N];
        let mut recv = vec![0.0; N];
        c.all_reduce_compressed(&send, &mut recv, &mut z).unwrap();
        z.reset();
        recv
    });
    assert_eq!(got[0], got[1]);
    assert_eq!(got[0].iter().filter(|&&x| x != 0.0).count(), 50);
    assert!(got[0].iter().all(|&x| x == 0.0 || x == 3.0));
    on_each(&w, |c| {
        let ratio = 0.01 * (c.rank() as f64 + 1.0);
        let mut z = Compressor::new::<f32>(CompressKind::TopK, ratio, N, 0).unwrap();
        let send = vec![1.0f32; N];
        let mut recv = vec![0.0f32; N];
        let e = c
            .all_reduce_compressed(&send, &mut recv, &mut z)
            .unwrap_err();
        assert_eq!(e.status, Status::Mismatch, "{}", e);
    });
    let e = Compressor::new::<i32>(CompressKind::TopK, 0.1, 10, 0).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
}

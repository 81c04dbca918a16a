//! Every blocking collective, with exact results, on 2 and 3 ranks; every
//! element type and operator through all_reduce; F16 and Bf16 through
//! all_reduce, broadcast and all_gather.

mod common;

use common::{on_each, world};
use libnexar::{Bf16, Communicator, Element, Op, Status, F16};
use std::fmt::Debug;
use std::time::{Duration, Instant};

/// Numbers the tests can make from small integers.
trait Num: Element + PartialEq + Debug {
    fn of(v: i64) -> Self;
}

macro_rules! num {
    ($($t:ty),*) => {$(
        impl Num for $t {
            fn of(v: i64) -> Self { v as $t }
        }
    )*};
}
num!(f32, f64, i8, i32, i64, u8, u32, u64);

fn of<T: Num>(v: &[i64]) -> Vec<T> {
    v.iter().map(|&x| T::of(x)).collect()
}

const SIZES: [u32; 2] = [2, 3];

#[test]
fn all_reduce_sum_exact() {
    for n in SIZES {
        let w = world(n);
        let out = on_each(&w, |c| {
            let r = c.rank() as i64;
            let mut v: Vec<f64> = (0..5).map(|i| (r * 100 + i) as f64 + 0.25).collect();
            c.all_reduce(&mut v, Op::Sum).unwrap();
            v
        });
        let n = n as i64;
        let want: Vec<f64> = (0..5)
            .map(|i| (0..n).map(|r| (r * 100 + i) as f64 + 0.25).sum())
            .collect();
        for v in out {
            assert_eq!(v, want);
        }
    }
}

/// Every Element type with every operator on 3 ranks (values small enough
/// for i8/u8), and on 2 ranks for Sum.
fn every_op<T: Num>() {
    let w = world(3);
    let out = on_each(&w, |c| {
        let r = c.rank() as i64;
        // rank r holds [r+1, 3-r, 2*r+1, 7]
        let base = [r + 1, 3 - r, 2 * r + 1, 7];
        let mut results = Vec::new();
        for op in [Op::Sum, Op::Prod, Op::Min, Op::Max] {
            let mut v: Vec<T> = of(&base);
            c.all_reduce(&mut v, op).unwrap();
            results.push(v);
        }
        results
    });
    // ranks 0,1,2 hold [1,3,1,7] [2,2,3,7] [3,1,5,7]; 7*7*7 = 343 wraps to 87 in a byte.
    let cube = if std::mem::size_of::<T>() == 1 {
        87
    } else {
        343
    };
    let want: Vec<Vec<T>> = vec![
        of(&[6, 6, 9, 21]),
        of(&[6, 6, 15, cube]),
        of(&[1, 1, 1, 7]),
        of(&[3, 3, 5, 7]),
    ];
    for (rank, got) in out.iter().enumerate() {
        for (k, op) in ["sum", "prod", "min", "max"].iter().enumerate() {
            assert_eq!(got[k], want[k], "rank {} {}", rank, op);
        }
    }
    let w2 = world(2);
    let out = on_each(&w2, |c| {
        let mut v: Vec<T> = of(&[c.rank() as i64 + 1, 10]);
        c.all_reduce(&mut v, Op::Sum).unwrap();
        v
    });
    for v in out {
        assert_eq!(v, of::<T>(&[3, 20]));
    }
}

#[test]
fn all_reduce_f32() {
    every_op::<f32>();
}
#[test]
fn all_reduce_f64() {
    every_op::<f64>();
}
#[test]
fn all_reduce_i8() {
    every_op::<i8>();
}
#[test]
fn all_reduce_i32() {
    every_op::<i32>();
}
#[test]
fn all_reduce_i64() {
    every_op::<i64>();
}
#[test]
fn all_reduce_u8() {
    every_op::<u8>();
}
#[test]
fn all_reduce_u32() {
    every_op::<u32>();
}
#[test]
fn all_reduce_u64() {
    every_op::<u64>();
}

/// The half-precision types, compared bit for bit.
trait Half: Element + From<f32> + Debug {
    /// The step between 1 and the next value.
    const ULP: f32;
    fn bits(self) -> u16;
    fn value(self) -> f32;
}

impl Half for F16 {
    const ULP: f32 = 1.0 / 1024.0;
    fn bits(self) -> u16 {
        self.to_bits()
    }
    fn value(self) -> f32 {
        self.to_f32()
    }
}

impl Half for Bf16 {
    const ULP: f32 = 1.0 / 128.0;
    fn bits(self) -> u16 {
        self.to_bits()
    }
    fn value(self) -> f32 {
        self.to_f32()
    }
}

fn halves<T: Half>(v: &[f32]) -> Vec<T> {
    v.iter().map(|&x| T::from(x)).collect()
}

fn bits<T: Half>(v: &[T]) -> Vec<u16> {
    v.iter().map(|&x| x.bits()).collect()
}

/// all_reduce Sum, Max and Min of F16 or Bf16 on 3 ranks. Every value and
/// every partial result is exact in both types (whatever order nexar adds
/// in), so results are compared bit for bit; one column holds an infinity.
fn half_all_reduce<T: Half>() {
    let rows: [[f32; 5]; 3] = [
        [0.5, -2.0, 96.0, 0.0, 1.0],
        [1.5, -4.0, 64.0, 0.25, f32::INFINITY],
        [2.5, -6.0, 32.0, 0.5, -3.0],
    ];
    let w = world(3);
    let out = on_each(&w, |c| {
        let mut results = Vec::new();
        for op in [Op::Sum, Op::Max, Op::Min] {
            let mut v: Vec<T> = halves(&rows[c.rank() as usize]);
            c.all_reduce(&mut v, op).unwrap();
            results.push(bits(&v));
        }
        results
    });
    let inf = f32::INFINITY;
    let want = [
        bits::<T>(&halves(&[4.5, -12.0, 192.0, 0.75, inf])),
        bits::<T>(&halves(&[2.5, -2.0, 96.0, 0.5, inf])),
        bits::<T>(&halves(&[0.5, -6.0, 32.0, 0.0, -3.0])),
    ];
    for (rank, got) in out.iter().enumerate() {
        for (k, op) in ["sum", "max", "min"].iter().enumerate() {
            assert_eq!(got[k], want[k], "rank {} {}", rank, op);
        }
    }
}

#[test]
fn all_reduce_f16() {
    half_all_reduce::<F16>();
}
#[test]
fn all_reduce_bf16() {
    half_all_reduce::<Bf16>();
}

/// A sum that must round: nexar rounds the exact f32 sum once to nearest
/// even, which is what T::from(a + b) does here.
fn half_sum_rounds_like_from_f32<T: Half>() {
    let u = T::ULP;
    let w = world(2);
    let a = [1.0, 1.0 + u, 3.0, -1.0, 1.0];
    let b = [u / 2.0, u / 2.0, 1.0 / 3.0, -u / 2.0, 0.75 * u];
    let out = on_each(&w, |c| {
        let mut v: Vec<T> = halves(if c.rank() == 0 { &a } else { &b });
        c.all_reduce(&mut v, Op::Sum).unwrap();
        bits(&v)
    });
    let want: Vec<u16> = a
        .iter()
        .zip(b.iter())
        .map(|(&x, &y)| T::from(T::from(x).value() + T::from(y).value()).bits())
        .collect();
    // The ties went to even: 1 + u/2 -> 1, (1 + u) + u/2 -> 1 + 2u.
    assert_eq!(want[0], T::from(1.0).bits());
    assert_eq!(want[1], T::from(1.0 + 2.0 * u).bits());
    assert_eq!(want[4], T::from(1.0 + u).bits());
    for v in out {
        assert_eq!(v, want);
    }
}

#[test]
fn half_sums_round_to_nearest_even() {
    half_sum_rounds_like_from_f32::<F16>();
    half_sum_rounds_like_from_f32::<Bf16>();
}

/// broadcast from each root and all_gather of F16 or Bf16 on 3 ranks.
fn half_broadcast_and_all_gather<T: Half>() {
    let n = 3u32;
    let w = world(n);
    for root in 0..n {
        let out = on_each(&w, |c| {
            let mut v: Vec<T> = if c.rank() == root {
                halves(&[root as f32, -0.5, 1024.0, f32::NEG_INFINITY])
            } else {
                vec![T::ZERO; 4]
            };
            c.broadcast(&mut v, root).unwrap();
            bits(&v)
        });
        let want = bits::<T>(&halves(&[root as f32, -0.5, 1024.0, f32::NEG_INFINITY]));
        for v in out {
            assert_eq!(v, want, "root {}", root);
        }
    }
    let out = on_each(&w, |c| {
        let r = c.rank() as f32;
        let send: Vec<T> = halves(&[r, -r - 0.25]);
        let mut recv = vec![T::ZERO; 2 * n as usize];
        c.all_gather(&send, &mut recv).unwrap();
        bits(&recv)
    });
    let want = bits::<T>(&halves(&[0.0, -0.25, 1.0, -1.25, 2.0, -2.25]));
    for v in out {
        assert_eq!(v, want);
    }
}

#[test]
fn broadcast_and_all_gather_f16() {
    half_broadcast_and_all_gather::<F16>();
}
#[test]
fn broadcast_and_all_gather_bf16() {
    half_broadcast_and_all_gather::<Bf16>();
}

#[test]
fn broadcast_from_each_root() {
    for n in SIZES {
        let w = world(n);
        for root in 0..n {
            let out = on_each(&w, |c| {
                let mut v: Vec<i32> = if c.rank() == root {
                    (0..6).map(|i| i * 7 + root as i32).collect()
                } else {
                    vec![-1; 6]
                };
                c.broadcast(&mut v, root).unwrap();
                v
            });
            let want: Vec<i32> = (0..6).map(|i| i * 7 + root as i32).collect();
            for v in out {
                assert_eq!(v, want, "n {} root {}", n, root);
            }
        }
    }
}

#[test]
fn reduce_writes_only_the_root() {
    for n in SIZES {
        let w = world(n);
        let root = n - 1;
        let out = on_each(&w, |c| {
            let r = c.rank() as u64;
            let mut v = vec![r + 1, 10 * (r + 1), 5];
            c.reduce(&mut v, Op::Sum, root).unwrap();
            v
        });
        let n64 = n as u64;
        let sum: u64 = (1..=n64).sum();
        for (r, v) in out.iter().enumerate() {
            if r as u32 == root {
                assert_eq!(v, &vec![sum, 10 * sum, 5 * n64]);
            } else {
                let r = r as u64;
                assert_eq!(v, &vec![r + 1, 10 * (r + 1), 5], "non-root {} changed", r);
            }
        }
    }
}

#[test]
fn all_gather_in_rank_order() {
    for n in SIZES {
        let w = world(n);
        let out = on_each(&w, |c| {
            let r = c.rank() as i64;
            let send = vec![r * 10, r * 10 + 1];
            let mut recv = vec![-1i64; 2 * n as usize];
            c.all_gather(&send, &mut recv).unwrap();
            recv
        });
        let want: Vec<i64> = (0..n as i64)
            .flat_map(|r| vec![r * 10, r * 10 + 1])
            .collect();
        for v in out {
            assert_eq!(v, want);
        }
    }
}

#[test]
fn reduce_scatter_gives_block_r() {
    for n in SIZES {
        let w = world(n);
        let out = on_each(&w, |c| {
            let r = c.rank() as i32;
            let send: Vec<i32> = (0..2 * n as i32).map(|j| r + j * 100).collect();
            let mut recv = vec![-1i32; 2];
            c.reduce_scatter(&send, &mut recv, Op::Sum).unwrap();
            recv
        });
        let n32 = n as i32;
        let ranks_sum = n32 * (n32 - 1) / 2;
        for (r, v) in out.iter().enumerate() {
            let r = r as i32;
            let want: Vec<i32> = (2 * r..2 * r + 2)
                .map(|j| ranks_sum + n32 * j * 100)
                .collect();
            assert_eq!(v, &want, "rank {}", r);
        }
    }
}

#[test]
fn all_to_all_transposes_blocks() {
    for n in SIZES {
        let w = world(n);
        let out = on_each(&w, |c| {
            let r = c.rank();
            let send: Vec<u32> = (0..n)
                .flat_map(|j| vec![r * 100 + j * 10, r * 100 + j * 10 + 1])
                .collect();
            let mut recv = vec![0u32; send.len()];
            c.all_to_all(&send, &mut recv).unwrap();
            recv
        });
        for (r, v) in out.iter().enumerate() {
            let r = r as u32;
            let want: Vec<u32> = (0..n)
                .flat_map(|i| vec![i * 100 + r * 10, i * 100 + r * 10 + 1])
                .collect();
            assert_eq!(v, &want, "rank {}", r);
        }
    }
}

#[test]
fn gather_to_root() {
    for n in SIZES {
        let w = world(n);
        for root in [0, n - 1] {
            let out = on_each(&w, |c| {
                let r = c.rank() as f32;
                let send = vec![r, r + 0.5];
                let mut recv = if c.rank() == root {
                    vec![-1.0f32; 2 * n as usize]
                } else {
                    Vec::new()
                };
                c.gather(&send, &mut recv, root).unwrap();
                recv
            });
            let want: Vec<f32> = (0..n)
                .flat_map(|r| vec![r as f32, r as f32 + 0.5])
                .collect();
            for (r, v) in out.iter().enumerate() {
                if r as u32 == root {
                    assert_eq!(v, &want);
                } else {
                    assert!(v.is_empty());
                }
            }
        }
    }
}

#[test]
fn scatter_from_root() {
    for n in SIZES {
        let w = world(n);
        let root = n - 1;
        let out = on_each(&w, |c| {
            let send: Vec<i64> = if c.rank() == root {
                (0..3 * n as i64).map(|i| i * i).collect()
            } else {
                Vec::new()
            };
            let mut recv = vec![-1i64; 3];
            c.scatter(&send, &mut recv, root).unwrap();
            recv
        });
        for (r, v) in out.iter().enumerate() {
            let r = r as i64;
            let want: Vec<i64> = (3 * r..3 * r + 3).map(|i| i * i).collect();
            assert_eq!(v, &want, "rank {}", r);
        }
    }
}

#[test]
fn scan_and_exscan_prefixes() {
    for n in SIZES {
        let w = world(n);
        let out = on_each(&w, |c| {
            let r = c.rank() as i32;
            let mut inc = vec![r + 1, 10 - r];
            c.scan(&mut inc, Op::Sum).unwrap();
            let mut max = vec![r + 1, 10 - r];
            c.scan(&mut max, Op::Max).unwrap();
            let mut ex = vec![r + 1, 10 - r];
            if r == 0 {
                ex = vec![-7, -8]; // rank 0 is left as it was
            }
            c.exscan(&mut ex, Op::Sum).unwrap();
            (inc, max, ex)
        });
        for (r, (inc, max, ex)) in out.iter().enumerate() {
            let r = r as i32;
            let tri = (r + 1) * (r + 2) / 2;
            assert_eq!(
                inc,
                &vec![tri, (0..=r).map(|q| 10 - q).sum::<i32>()],
                "scan rank {}",
                r
            );
            assert_eq!(max, &vec![r + 1, 10], "scan max rank {}", r);
            if r == 0 {
                assert_eq!(ex, &vec![-7, -8], "exscan must leave rank 0 alone");
            } else {
                // rank 0 contributed [-7, -8], rank q > 0 [q + 1, 10 - q]
                let want = vec![
                    -7 + (1..r).map(|q| q + 1).sum::<i32>(),
                    -8 + (1..r).map(|q| 10 - q).sum::<i32>(),
                ];
                assert_eq!(ex, &want, "exscan rank {}", r);
            }
        }
    }
}

#[test]
fn barrier_waits_for_the_last_rank() {
    for n in SIZES {
        let w = world(n);
        on_each(&w, |c| c.barrier().unwrap());
        let delay = Duration::from_millis(300);
        let waited = on_each(&w, |c| {
            if c.rank() == n - 1 {
                std::thread::sleep(delay);
            }
            let t = Instant::now();
            c.barrier().unwrap();
            t.elapsed()
        });
        for (r, t) in waited.iter().enumerate().take(n as usize - 1) {
            assert!(
                *t >= Duration::from_millis(200),
                "rank {} left the barrier after {:?}",
                r,
                t
            );
        }
    }
}

#[test]
fn empty_buffers_complete() {
    let w = world(2);
    on_each(&w, |c| {
        let mut v: Vec<f32> = Vec::new();
        c.all_reduce(&mut v, Op::Sum).unwrap();
        c.broadcast(&mut v, 0).unwrap();
    });
}

#[test]
fn local_argument_checks() {
    // Refused before nexar is called: no rank has to take part.
    let w = world(2);
    let c: &Communicator = &w[0];
    let e = c.all_gather(&[1i32, 2], &mut [0i32; 3]).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    assert_eq!(e.op, "all_gather");
    assert!(e.message.contains("recv holds 3 elements"), "{}", e);
    let e = c
        .reduce_scatter(&[1i32, 2, 3], &mut [0i32; 2], Op::Sum)
        .unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    let e = c.all_to_all(&[1u8, 2, 3], &mut [0u8; 3]).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("not a multiple of the 2 ranks"), "{}", e);
    let e = c.all_to_all(&[1u8, 2], &mut [0u8; 4]).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("same number of elements"), "{}", e);
    let e = c.gather(&[1u8], &mut [0u8; 1], 0).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    let e = c.scatter(&[1u8], &mut [0u8; 1], 0).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
}

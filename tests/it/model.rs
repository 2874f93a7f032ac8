//! A model-based test of the arena: random programs of allocations, uploads, kernels,
//! reads, frees, trims, pools and budget changes run on several threads against one
//! runtime, and every read is compared with a CPU shadow of each live allocation. proptest
//! generates (and shrinks) the programs; the soak (`examples/soak.rs`) runs the same idea
//! for minutes.

use crate::common;

use std::sync::Arc;

use proptest::prelude::*;
use vramkit::arena::{Budget, PoolConfig, PoolId, Typed};
use vramkit::{Error, Runtime, RuntimeConfig};

#[derive(Clone, Debug)]
enum Op {
    /// Allocate `4 << len_log` bytes-ish (`len` f32s) in the default or the quota'd pool.
    Alloc {
        aux: bool,
        len: usize,
        seed: u32,
    },
    /// Overwrite a live allocation with new values.
    Upload {
        at: usize,
        seed: u32,
    },
    /// `y += alpha * x` on two live allocations (the shorter length).
    Axpy {
        x: usize,
        y: usize,
        negative: bool,
    },
    /// Read back and compare.
    Read {
        at: usize,
    },
    Free {
        at: usize,
    },
    Trim,
    Budget {
        low: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (any::<bool>(), 1usize..20_000, any::<u32>()).prop_map(|(aux, len, seed)| Op::Alloc { aux, len, seed }),
        1 => (any::<usize>(), any::<u32>()).prop_map(|(at, seed)| Op::Upload { at, seed }),
        3 => (any::<usize>(), any::<usize>(), any::<bool>()).prop_map(|(x, y, negative)| Op::Axpy { x, y, negative }),
        2 => any::<usize>().prop_map(|at| Op::Read { at }),
        2 => any::<usize>().prop_map(|at| Op::Free { at }),
        1 => Just(Op::Trim),
        1 => any::<bool>().prop_map(|low| Op::Budget { low }),
    ]
}

/// Small integers: every sum stays exact in f32, so reads must match bit for bit.
fn values(seed: u32, n: usize) -> Vec<f32> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s % 17) as f32 - 8.0
        })
        .collect()
}

struct Live {
    gpu: Typed<f32>,
    shadow: Vec<f32>,
}

/// Runs one thread's program; returns a description of the first mismatch or unexpected
/// error.
fn run(rt: &Runtime, aux: PoolId, ops: &[Op]) -> Result<(), String> {
    let mut live: Vec<Live> = Vec::new();
    let expected = |e: Error| match e {
        Error::OutOfMemory(_) => Ok(()),
        e => Err(format!("unexpected error: {e}")),
    };
    for op in ops {
        match *op {
            Op::Alloc {
                aux: in_aux,
                len,
                seed,
            } => {
                let a = if in_aux {
                    rt.arena()
                        .alloc_in(aux, 4 * len as u64, "model aux")
                        .and_then(|a| a.typed::<f32>())
                } else {
                    rt.alloc::<f32>(len, "model")
                };
                match a {
                    Ok(gpu) => {
                        let shadow = values(seed, gpu.len());
                        rt.upload(&gpu, &shadow)
                            .map_err(|e| format!("upload: {e}"))?;
                        live.push(Live { gpu, shadow });
                    }
                    Err(e) => expected(e)?,
                }
            }
            Op::Upload { at, seed } if !live.is_empty() => {
                let n = live.len();
                let l = &mut live[at % n];
                l.shadow = values(seed, l.gpu.len());
                rt.upload(&l.gpu, &l.shadow)
                    .map_err(|e| format!("upload: {e}"))?;
            }
            Op::Axpy { x, y, negative } if live.len() >= 2 => {
                let (x, y) = (x % live.len(), y % live.len());
                if x == y {
                    continue;
                }
                let n = live[x].gpu.len().min(live[y].gpu.len());
                let alpha = if negative { -1.0 } else { 1.0 };
                let mut batch = rt.batch();
                let recorded = batch
                    .axpy(
                        alpha,
                        live[x].gpu.first(n).ok_or("empty")?,
                        live[y].gpu.first(n).ok_or("empty")?,
                    )
                    .map(|_| ());
                match recorded.and_then(|()| batch.submit().map(|_| ())) {
                    Ok(()) => {
                        let xs = live[x].shadow[..n].to_vec();
                        for (v, x) in live[y].shadow[..n].iter_mut().zip(xs) {
                            *v += alpha * x;
                        }
                    }
                    Err(e) => expected(e)?,
                }
            }
            Op::Read { at } if !live.is_empty() => {
                let l = &live[at % live.len()];
                let got = rt.download(&l.gpu).map_err(|e| format!("download: {e}"))?;
                if let Some(k) = (0..got.len()).find(|&k| got[k] != l.shadow[k]) {
                    return Err(format!(
                        "'{}' ({} elements) element {k}: got {} want {}",
                        l.gpu.label(),
                        l.gpu.len(),
                        got[k],
                        l.shadow[k]
                    ));
                }
            }
            Op::Free { at } if !live.is_empty() => {
                live.swap_remove(at % live.len());
            }
            Op::Trim => {
                rt.arena().trim();
            }
            Op::Budget { low } => {
                let bytes = if low { 2 << 20 } else { 256 << 20 };
                rt.arena()
                    .set_budget(Budget::Bytes(bytes))
                    .map_err(|e| e.to_string())?;
            }
            _ => {}
        }
        rt.arena()
            .check_invariants()
            .map_err(|broken| format!("after {op:?}: arena invariant {broken}"))?;
    }
    // Everything still live reads back as its shadow.
    for l in &live {
        let got = rt
            .download(&l.gpu)
            .map_err(|e| format!("final download: {e}"))?;
        if got != l.shadow {
            return Err(format!("'{}' differs at the end", l.gpu.label()));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, max_shrink_iters: 64, ..ProptestConfig::default() })]

    #[test]
    fn threads_of_random_programs_read_back_what_their_shadow_says(
        programs in proptest::collection::vec(proptest::collection::vec(op(), 10..60), 3)
    ) {
        let rt = Arc::new(
            Runtime::new(
                common::gpu(),
                RuntimeConfig {
                    arena: vramkit::ArenaConfig {
                        name: "model".into(),
                        budget: Budget::Bytes(256 << 20),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .unwrap(),
        );
        let aux = rt
            .arena()
            .add_pool(
                "aux",
                PoolConfig {
                    quota: Some(1 << 20),
                    usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
                    ..Default::default()
                },
            )
            .unwrap();
        let results: Vec<Result<(), String>> = std::thread::scope(|s| {
            let handles: Vec<_> = programs
                .iter()
                .map(|p| {
                    let rt = rt.clone();
                    s.spawn(move || run(&rt, aux, p))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("panicked".into()))).collect()
        });
        for r in results {
            prop_assert!(r.is_ok(), "{}", r.unwrap_err());
        }
        // Nothing leaks: with every allocation dropped, trim gives all blocks back.
        rt.synchronize().unwrap();
        rt.arena().trim();
        let s = rt.arena().stats();
        prop_assert_eq!(s.allocated, 0);
        prop_assert_eq!(s.live_allocations, 0);
    }
}

//! Several threads against tiers, defragmentation, guard bytes and labels, as a user of an
//! outside crate drives them: no write is lost, nothing is copied out of place, no two
//! locks deadlock, and nothing grows with every distinct label.
//!
//! Each test here reproduces one way these layers once failed; where the failure needs a
//! window between two threads, the test widens it (a long GPU job, many rounds) and checks
//! the property itself, so it passes only when the property holds.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use vramkit::arena::Budget;
use vramkit::kernels::MatmulShape;
use vramkit::tier::{DefragLimits, Movable, TierConfig, Tiers};
use vramkit::{Arena, ArenaConfig, Runtime, RuntimeConfig};

const MIB: u64 = 1 << 20;

fn runtime(name: &str, budget: Budget, guard_bytes: u64) -> Runtime {
    Runtime::new(
        common::gpu(),
        RuntimeConfig {
            arena: ArenaConfig {
                name: name.into(),
                budget,
                guard_bytes,
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn read(rt: &Runtime, tiers: &Tiers, m: &Movable) -> Vec<f32> {
    let r = tiers.make_resident(&[m]).unwrap();
    rt.download(r.elements::<f32>(m).unwrap()).unwrap()
}

fn write(rt: &Runtime, tiers: &Tiers, m: &Movable, data: &[f32]) {
    let r = tiers.make_resident(&[m]).unwrap();
    rt.upload(r.elements::<f32>(m).unwrap(), data).unwrap();
}

/// Runs `f` on a thread of its own and fails the test if it does not return within
/// `limit` (a deadlock), passing its panic on otherwise.
fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let out = f();
        let _ = tx.send(());
        out
    });
    match rx.recv_timeout(limit) {
        Ok(()) => worker.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => match worker.join() {
            Ok(out) => out,
            Err(panic) => std::panic::resume_unwind(panic),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: still running after {limit:?} (a deadlock)")
        }
    }
}

/// `Tiers::evict` waits for the GPU work still using a movable without the tier's lock;
/// a thread that pins the movable meanwhile must keep it on the device (evict fails, as
/// its docs say), or the writes through that pin land in a device allocation nobody
/// reads again.
#[test]
fn an_evict_that_waited_for_the_gpu_never_moves_what_was_pinned_meanwhile() {
    let rt = Arc::new(runtime("evict-window", Budget::Unlimited, 0));
    let tiers = Tiers::new(rt.arena(), TierConfig::default()).unwrap();
    let n = 1 << 20;
    let m = Arc::new(tiers.alloc(4 * n as u64, "contested").unwrap());
    write(&rt, &tiers, &m, &vec![1.0f32; n]);
    // A long job in the same submission as a touch of `m`: `m` stays in flight for as long
    // as the job runs, and `evict` has to wait that long without the lock.
    let dim = 768usize;
    let a = rt.alloc_from(&vec![0.5f32; dim * dim], "a").unwrap();
    let c = rt.alloc::<f32>(dim * dim, "c").unwrap();
    let mut outcomes = Vec::new();
    for _round in 0..3 {
        {
            let r = tiers.make_resident(&[&m]).unwrap();
            let mut batch = rt.batch();
            for _ in 0..4 {
                batch
                    .matmul(
                        MatmulShape {
                            m: dim as u64,
                            k: dim as u64,
                            n: dim as u64,
                        },
                        &a,
                        &a,
                        &c,
                    )
                    .unwrap();
            }
            batch.fill(1.0, r.elements::<f32>(&m).unwrap()).unwrap();
            batch.submit().unwrap();
        }
        let evicting = Arc::new(Barrier::new(2));
        let evicted = Arc::new(AtomicBool::new(false));
        let evictor = {
            let (tiers, m, evicting, evicted) =
                (tiers.clone(), m.clone(), evicting.clone(), evicted.clone());
            std::thread::spawn(move || {
                evicting.wait();
                let r = tiers.evict(&[&m]);
                evicted.store(true, Ordering::Release);
                r
            })
        };
        evicting.wait();
        std::thread::sleep(Duration::from_millis(20));
        let r = tiers.make_resident(&[&m]).unwrap();
        // Hold the pin until the evict returned, then write through it.
        while !evicted.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut batch = rt.batch();
        batch.fill(7.0, r.elements::<f32>(&m).unwrap()).unwrap();
        batch.submit().unwrap();
        drop(r);
        let evict = evictor.join().unwrap();
        let got = read(&rt, &tiers, &m);
        assert!(
            got.iter().all(|&v| v == 7.0),
            "the write through the pin was lost (evict returned {evict:?}): read {}",
            got[0]
        );
        outcomes.push(evict.map_err(|e| e.to_string()));
        write(&rt, &tiers, &m, &vec![1.0f32; n]);
    }
    eprintln!("evict outcomes: {outcomes:?}");
}

/// `defragment` against movables dropped and created meanwhile on other threads, of
/// other sizes (the freed slot is taken by the next movable), and evicted and restored
/// meanwhile: every movable keeps its bytes, plain allocations beside them keep theirs,
/// no call panics and nothing stays stuck moving.
#[test]
fn defragmenting_while_movables_come_and_go_moves_nothing_out_of_place() {
    within(
        Duration::from_secs(120),
        "defragmenting against churn",
        churn_against_defragment,
    );
}

fn churn_against_defragment() {
    let rt = Arc::new(runtime("defrag-churn", Budget::Unlimited, 0));
    let tiers = Tiers::new(rt.arena(), TierConfig::default()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let seed: u64 = common::rng().gen();
    let rounds = Arc::new(AtomicU64::new(0));
    let defrag = {
        let (tiers, stop, rounds) = (tiers.clone(), stop.clone(), rounds.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                tiers.defragment(DefragLimits::default()).unwrap();
                rounds.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    // Plain allocations between the movables: an overrun of a move lands in them.
    let plain: Vec<_> = (0..8)
        .map(|i| {
            let d = vec![i as f32 + 0.25; 16 << 10];
            (rt.alloc_from(&d, &format!("plain{i}")).unwrap(), d)
        })
        .collect();
    let workers: Vec<_> = (0..2u64)
        .map(|w| {
            let (rt, tiers, stop) = (rt.clone(), tiers.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = rand::rngs::SmallRng::seed_from_u64(seed ^ w);
                let mut live: Vec<(Movable, Vec<f32>)> = Vec::new();
                let mut next = 0u32;
                let deadline = Instant::now() + Duration::from_secs(4);
                while Instant::now() < deadline {
                    match rng.gen_range(0..6) {
                        0..=2 if live.len() < 48 => {
                            let n = rng.gen_range(1usize..64) << 10;
                            let m = tiers.alloc(4 * n as u64, &format!("w{w}m{next}")).unwrap();
                            let d: Vec<f32> =
                                (0..n).map(|i| (next as usize * 7 + i) as f32).collect();
                            next += 1;
                            write(&rt, &tiers, &m, &d);
                            live.push((m, d));
                        }
                        0..=3 if !live.is_empty() => {
                            let i = rng.gen_range(0..live.len());
                            live.swap_remove(i);
                        }
                        4 if !live.is_empty() => {
                            let i = rng.gen_range(0..live.len());
                            let _ = tiers.evict(&[&live[i].0]);
                        }
                        _ if !live.is_empty() => {
                            let i = rng.gen_range(0..live.len());
                            let (m, d) = &live[i];
                            assert_eq!(&read(&rt, &tiers, m), d, "thread {w}: {}", m.label());
                        }
                        _ => {}
                    }
                }
                for (m, d) in &live {
                    assert_eq!(&read(&rt, &tiers, m), d, "thread {w}: {}", m.label());
                }
                drop(live);
                let _ = stop;
            })
        })
        .collect();
    let joined: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
    stop.store(true, Ordering::Relaxed);
    let defrag = defrag.join();
    for j in joined {
        if let Err(p) = j {
            std::panic::resume_unwind(p);
        }
    }
    if let Err(p) = defrag {
        std::panic::resume_unwind(p);
    }
    for (a, d) in &plain {
        assert_eq!(&rt.download(a).unwrap(), d, "plain allocation overwritten");
    }
    let s = tiers.stats();
    assert_eq!((s.movables, s.pinned), (0, 0), "{}", tiers.summary());
    eprintln!(
        "{} defragmentations, {} moves",
        rounds.load(Ordering::Relaxed),
        s.defrag_moves
    );
}

/// A guarded arena fills each new allocation's guards through the queue; a work-done
/// callback, which wgpu runs inside another thread's submit with the queue lock held,
/// drops an allocation and so takes the arena's lock. Neither may wait for the other.
#[test]
fn callbacks_that_drop_allocations_never_deadlock_a_guarded_arena() {
    let rt = Arc::new(runtime("guarded-callbacks", Budget::Unlimited, 256));
    within(
        Duration::from_secs(120),
        "guard fills against callbacks",
        move || {
            let stop = Arc::new(AtomicBool::new(false));
            let allocator = {
                let (arena, stop): (Arena, _) = (rt.arena().clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let a = arena.alloc(rng.gen_range(1u64..64) * 256, "fresh").unwrap();
                        drop(a);
                        n += 1;
                    }
                    n
                })
            };
            let gpu = rt.gpu().clone();
            for i in 0..3000 {
                let a = rt.arena().alloc(1024, "dropped by a callback").unwrap();
                gpu.queue().on_submitted_work_done(move || drop(a));
                let encoder = gpu.device().create_command_encoder(&Default::default());
                gpu.submit([encoder.finish()]);
                if i % 64 == 0 {
                    gpu.wait_idle().unwrap();
                }
            }
            stop.store(true, Ordering::Relaxed);
            let n = allocator.join().unwrap();
            gpu.wait_idle().unwrap();
            assert!(n > 0);
            assert!(rt.arena().check_guards().unwrap().is_empty());
        },
    );
}

/// A server that labels every allocation differently keeps a bounded label table: labels
/// with nothing live are folded away, and the summary stays short.
#[test]
fn distinct_labels_with_nothing_live_are_folded_away() {
    let rt = runtime("many-labels", Budget::Unlimited, 0);
    let arena = rt.arena();
    let keep = arena
        .alloc(4096, "kept while the others come and go")
        .unwrap();
    let pairs = 200_000;
    for i in 0..pairs {
        drop(arena.alloc(256, &format!("request {i}")).unwrap());
    }
    let s = arena.stats();
    assert!(
        s.per_label.len() <= vramkit::arena::LABELS_KEPT + 1,
        "{} labels kept after {pairs} distinct ones",
        s.per_label.len()
    );
    assert!(s
        .per_label
        .iter()
        .any(|(l, st)| l == "kept while the others come and go" && st.count == 1));
    let summary = arena.summary();
    assert!(
        summary.len() < 256 << 10,
        "summary of {} bytes after {pairs} distinct labels",
        summary.len()
    );
    assert!(summary.contains("folded"), "{summary}");
    assert_eq!(keep.label(), "kept while the others come and go");
    // A label folded away and used again is counted afresh.
    let again = arena.alloc(512, "request 0").unwrap();
    assert_eq!(again.label(), "request 0");
    assert!(arena
        .stats()
        .per_label
        .iter()
        .any(|(l, st)| l == "request 0" && st.count == 1 && st.bytes == 512));
}

/// One movable of the model test: the handle (shared, so other threads can evict and
/// prefetch it while its owner writes) and what its bytes must be.
struct ModelSlot {
    m: Arc<Movable>,
    shadow: Vec<f32>,
}

/// The multi-threaded model of tiered memory: writers pin movables (one or two at once)
/// and write them on the GPU, others evict and prefetch them without asking, one
/// defragments in bounded and whole passes, one allocates plain memory to keep the small
/// budget under pressure, and movables are dropped and made anew in other sizes. Every
/// byte is checked against a shadow, at random moments and at the end.
/// `VRAMKIT_TIER_MODEL_S` sets how long it runs (3 s by default).
#[test]
fn tiers_under_threads_keep_every_byte() {
    let seconds: u64 = std::env::var("VRAMKIT_TIER_MODEL_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    within(
        Duration::from_secs(seconds + 120),
        "the tiers' model",
        move || tier_model(Duration::from_secs(seconds)),
    );
}

fn tier_model(length: Duration) {
    use parking_lot::Mutex;
    let rt = Arc::new(runtime("tier-model", Budget::Bytes(12 * MIB), 0));
    let tiers = Tiers::new(rt.arena(), TierConfig::default()).unwrap();
    let seed: u64 = common::rng().gen();
    let deadline = Instant::now() + length;
    let fresh = |rng: &mut rand::rngs::SmallRng, tag: usize| -> ModelSlot {
        let n = rng.gen_range(4usize..=96) << 10;
        let shadow: Vec<f32> = (0..n)
            .map(|_| rng.gen_range(-1000i32..1000) as f32)
            .collect();
        let m = loop {
            match tiers.alloc(4 * n as u64, &format!("model{tag}")) {
                Ok(m) => break m,
                Err(vramkit::Error::OutOfMemory(_)) => std::thread::yield_now(),
                Err(e) => panic!("alloc: {e}"),
            }
        };
        write_retrying(&rt, &tiers, &m, &shadow);
        ModelSlot {
            m: Arc::new(m),
            shadow,
        }
    };
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let slots: Arc<Vec<Mutex<ModelSlot>>> =
        Arc::new((0..24).map(|i| Mutex::new(fresh(&mut rng, i))).collect());
    let checked = Arc::new(AtomicU64::new(0));
    std::thread::scope(|s| {
        // Writers: each takes a slot's shadow lock while it writes and checks.
        for w in 0..3u64 {
            let (rt, tiers, slots, checked) = (&rt, &tiers, slots.clone(), checked.clone());
            let fresh = &fresh;
            s.spawn(move || {
                let mut rng = rand::rngs::SmallRng::seed_from_u64(seed ^ (w + 1));
                while Instant::now() < deadline {
                    let i = rng.gen_range(0..slots.len());
                    let j = rng.gen_range(0..slots.len());
                    match rng.gen_range(0..10) {
                        0..=4 => {
                            let Some(mut a) = slots[i].try_lock() else {
                                continue;
                            };
                            let k = rng.gen_range(-4i32..5) as f32;
                            if touch(rt, tiers, &a.m, k) {
                                a.shadow.iter_mut().for_each(|v| *v += k);
                            }
                        }
                        5 | 6 if i != j => {
                            // Two pinned at once: the smaller one's bytes into the other.
                            let Some(mut a) = slots[i].try_lock() else {
                                continue;
                            };
                            let Some(b) = slots[j].try_lock() else {
                                continue;
                            };
                            if copy_prefix(rt, tiers, &b.m, &a.m) {
                                let n = b.shadow.len().min(a.shadow.len());
                                a.shadow[..n].copy_from_slice(&b.shadow[..n]);
                            }
                        }
                        7 => {
                            let Some(mut a) = slots[i].try_lock() else {
                                continue;
                            };
                            *a = fresh(&mut rng, i);
                        }
                        _ => {
                            let Some(a) = slots[i].try_lock() else {
                                continue;
                            };
                            if let Some(got) = read_retrying(rt, tiers, &a.m) {
                                assert!(got == a.shadow, "writer {w}: {} lost bytes", a.m.label());
                                checked.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
            });
        }
        // Evictors and prefetchers: they never look at the bytes.
        for e in 0..2u64 {
            let (tiers, slots) = (&tiers, slots.clone());
            s.spawn(move || {
                let mut rng = rand::rngs::SmallRng::seed_from_u64(seed ^ (100 + e));
                while Instant::now() < deadline {
                    let m = slots[rng.gen_range(0..slots.len())].lock().m.clone();
                    let result = if rng.gen_bool(0.5) {
                        tiers.evict(&[&m]).map(drop)
                    } else {
                        tiers.prefetch(&[&m])
                    };
                    match result {
                        Ok(()) | Err(vramkit::Error::OutOfMemory(_)) => {}
                        Err(vramkit::Error::InvalidArgument { .. }) => {} // pinned
                        Err(e) => panic!("evict/prefetch: {e}"),
                    }
                }
            });
        }
        // The defragmenter: bounded passes, now and then a whole one.
        {
            let tiers = &tiers;
            s.spawn(move || {
                let mut passes = 0u64;
                while Instant::now() < deadline {
                    let limits = if passes % 4 == 3 {
                        DefragLimits::default()
                    } else {
                        DefragLimits {
                            max_bytes: MIB,
                            max_moves: 8,
                        }
                    };
                    tiers.defragment(limits).unwrap();
                    passes += 1;
                }
            });
        }
        // Pressure from plain allocations.
        {
            let rt = &rt;
            s.spawn(move || {
                while Instant::now() < deadline {
                    drop(rt.arena().alloc(3 * MIB, "pressure"));
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
        }
    });
    for slot in slots.iter() {
        let a = slot.lock();
        let got = read_retrying(&rt, &tiers, &a.m).expect("a final read");
        assert!(got == a.shadow, "at the end: {} lost bytes", a.m.label());
    }
    drop(slots);
    let s = tiers.stats();
    assert_eq!((s.movables, s.pinned), (0, 0), "{}", tiers.summary());
    eprintln!(
        "{} checks, {} evictions, {} restores, {} defragmenting moves",
        checked.load(Ordering::Relaxed),
        s.evictions,
        s.restores,
        s.defrag_moves
    );
}

/// Adds `k` to every element of `m` on the GPU; false (nothing changed) when there was no
/// room for it under the budget.
fn touch(rt: &Runtime, tiers: &Tiers, m: &Movable, k: f32) -> bool {
    let r = match tiers.make_resident(&[m]) {
        Ok(r) => r,
        Err(vramkit::Error::OutOfMemory(_)) => return false,
        Err(e) => panic!("make_resident: {e}"),
    };
    let x = r.elements::<f32>(m).unwrap();
    let mut batch = rt.batch();
    if let Err(e) = batch.scale(1.0, k, x, x) {
        panic!("scale: {e}");
    }
    match batch.submit() {
        Ok(_) => true,
        Err(vramkit::Error::OutOfMemory(_)) => false,
        Err(e) => panic!("touch: {e}"),
    }
}

/// Copies the first elements of `from` into `to` (as many as both hold) with both pinned;
/// false when there was no room.
fn copy_prefix(rt: &Runtime, tiers: &Tiers, from: &Movable, to: &Movable) -> bool {
    let r = match tiers.make_resident(&[from, to]) {
        Ok(r) => r,
        Err(vramkit::Error::OutOfMemory(_)) => return false,
        Err(e) => panic!("make_resident: {e}"),
    };
    let (x, y) = (
        r.elements::<f32>(from).unwrap(),
        r.elements::<f32>(to).unwrap(),
    );
    let n = x.len().min(y.len());
    let mut batch = rt.batch();
    if let Err(e) = batch.copy(x.first(n).unwrap(), y.first(n).unwrap()) {
        panic!("copy: {e}");
    }
    match batch.submit() {
        Ok(_) => true,
        Err(vramkit::Error::OutOfMemory(_)) => false,
        Err(e) => panic!("copy: {e}"),
    }
}

/// Reads `m`, or `None` when the budget had no room for it at the moment.
fn read_retrying(rt: &Runtime, tiers: &Tiers, m: &Movable) -> Option<Vec<f32>> {
    for _ in 0..100 {
        match tiers.make_resident(&[m]) {
            Ok(r) => match rt.download(r.elements::<f32>(m).unwrap()) {
                Ok(got) => return Some(got),
                Err(vramkit::Error::OutOfMemory(_)) => {}
                Err(e) => panic!("download: {e}"),
            },
            Err(vramkit::Error::OutOfMemory(_)) => {}
            Err(e) => panic!("make_resident: {e}"),
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

/// Writes `data` into `m`, waiting for room under the budget.
fn write_retrying(rt: &Runtime, tiers: &Tiers, m: &Movable, data: &[f32]) {
    for _ in 0..1000 {
        match tiers.make_resident(&[m]) {
            Ok(r) => match rt.upload(r.elements::<f32>(m).unwrap(), data) {
                Ok(()) => return,
                Err(vramkit::Error::OutOfMemory(_)) => {}
                Err(e) => panic!("upload: {e}"),
            },
            Err(vramkit::Error::OutOfMemory(_)) => {}
            Err(e) => panic!("make_resident: {e}"),
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("no room to write {} in a second", m.label());
}

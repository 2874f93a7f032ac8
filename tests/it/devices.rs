//! Several devices in one host: two devices (on one lavapipe adapter in CI, two GPUs on
//! the H100 pair) behave as two: the ledger, copies between them through shared host
//! memory and through the host-copy fallback, sharded arrays, the all-reduce, live
//! budgets, misuse and a lost device. Every result is read back and checked against the
//! CPU on random inputs.

use crate::common;

use std::sync::{Arc, OnceLock};

use rand::{rngs::SmallRng, Rng, SeedableRng};
use vramkit::arena::Budget;
use vramkit::devices::{
    AllReduceAlgorithm, DeviceSet, DeviceSetOptions, Split, TransferConfig, TransferPath,
};
use vramkit::{DriverMemory, Error, RuntimeConfig};

/// Two devices, at least: every adapter of the best kind, or two on the one adapter.
fn set() -> &'static DeviceSet {
    static SET: OnceLock<DeviceSet> = OnceLock::new();
    common::gpu(); // fails with install advice when there is no adapter
    SET.get_or_init(|| {
        let set = DeviceSet::open_with(&DeviceSetOptions {
            count: Some(2),
            ..DeviceSetOptions::from_env().unwrap()
        })
        .expect("two devices");
        eprintln!("device set:\n{}", set.summary());
        set
    })
}

/// A set of `count` devices of its own (a loss or a reader installed there reaches no other
/// test).
fn fresh_set(count: usize) -> DeviceSet {
    DeviceSet::open_with(&DeviceSetOptions {
        count: Some(count),
        ..DeviceSetOptions::from_env().unwrap()
    })
    .unwrap()
}

/// A set of fresh runtimes on `set`'s devices, copying as `transfer` says.
fn on_the_same_gpus(set: &DeviceSet, transfer: TransferConfig) -> DeviceSet {
    DeviceSet::from_runtimes(
        (0..set.len())
            .map(|i| vramkit::Runtime::new(set.device(i).gpu(), RuntimeConfig::default()).unwrap())
            .collect(),
        transfer,
    )
    .unwrap()
}

/// `parts[d]` uploaded to device `d`, for each device.
fn per_device(set: &DeviceSet, parts: &[Vec<f32>], label: &str) -> Vec<vramkit::arena::Typed<f32>> {
    parts
        .iter()
        .enumerate()
        .map(|(d, p)| set.device(d).alloc_from(p, label).unwrap())
        .collect()
}

fn random_f32(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect()
}

#[test]
fn two_devices_are_two_devices_with_one_ledger() {
    let set = set();
    assert_eq!(set.len(), 2);
    let (d0, d1) = (set.device(0), set.device(1));
    assert!(!d0.gpu().same_device(d1.gpu()));
    let a = d0.alloc::<f32>(1 << 20, "on device 0").unwrap();
    let before = set.ledger();
    assert!(before.devices[0].allocated >= 4 << 20);
    assert_eq!(
        before.allocated(),
        before.devices.iter().map(|d| d.allocated).sum::<u64>()
    );
    // The other device refuses it.
    let y = d1.alloc::<f32>(1 << 20, "on device 1").unwrap();
    let mut batch = d1.batch();
    let err = batch.axpy(1.0, &a, &y).map(|_| ()).unwrap_err();
    assert!(err.to_string().contains("device"), "{err}");
    let summary = set.summary();
    assert!(
        summary.contains("total") && summary.contains("2 devices"),
        "{summary}"
    );
    assert!(
        d0.arena().summary().contains("device 0"),
        "{}",
        d0.arena().summary()
    );
    assert_eq!(set.device_of(a.allocation()).unwrap(), 0);
    assert_eq!(set.device_of(y.allocation()).unwrap(), 1);
}

#[test]
fn copies_between_devices_land_exactly_in_both_directions_and_both_paths() {
    let set = set();
    let shared_path = set.shares_host_memory(0, 1).unwrap();
    eprintln!("copies share host memory: {shared_path}");
    // A set that copies on the host between two staging buffers, on the same devices.
    let fallback = on_the_same_gpus(
        set,
        TransferConfig {
            path: TransferPath::HostCopy,
            chunk: Some(1 << 20),
            depth: 3,
            ..Default::default()
        },
    );
    assert!(!fallback.shares_host_memory(1, 0).unwrap());
    // And one that copies one chunk after the other (the serial host path).
    let serial = on_the_same_gpus(
        set,
        TransferConfig {
            chunk: Some(1 << 20),
            overlap: false,
            ..Default::default()
        },
    );
    // And wgpu's portable means (what Metal, DX12 and GL get).
    let portable = on_the_same_gpus(
        set,
        TransferConfig {
            path: TransferPath::Portable,
            chunk: Some(1 << 20),
            ..Default::default()
        },
    );
    for (k, len) in [1usize, 1000, (3 << 20) / 4 + 7, 5 << 20]
        .into_iter()
        .enumerate()
    {
        for (s, d) in [(0, 1), (1, 0)] {
            for which in [set, &fallback, &serial, &portable] {
                let data = random_f32(len, k as u64 * 10 + s as u64);
                let src = which.device(s).alloc_from(&data, "src").unwrap();
                let dst = which.device(d).alloc::<f32>(len + 16, "dst").unwrap();
                let pad = vec![7.0f32; len + 16];
                which.device(d).upload(&dst, &pad).unwrap();
                which
                    .copy(
                        (src.allocation(), 0),
                        (dst.allocation(), 32),
                        len as u64 * 4,
                    )
                    .unwrap();
                let got = which.device(d).download(&dst).unwrap();
                assert_eq!(&got[8..8 + len], &data[..], "{len} floats {s} -> {d}");
                assert!(got[..8].iter().chain(&got[8 + len..]).all(|&v| v == 7.0));
            }
        }
    }
}

#[test]
fn scatter_gather_broadcast_and_replicate_round_trip() {
    let set = set();
    let mut rng = SmallRng::seed_from_u64(3);
    for rows in [1usize, 2, 3, 1000] {
        let row_len = rng.gen_range(1..300);
        let x: Vec<u32> = (0..rows * row_len).map(|_| rng.gen()).collect();
        for split in [
            Split::Even,
            Split::Shares(vec![1.0, 3.0]),
            Split::Shares(vec![0.0, 1.0]),
        ] {
            let s = set.scatter(&x, row_len, &split, "x").unwrap();
            let covered: usize = s.shards().iter().map(|sh| sh.rows.len()).sum();
            assert_eq!(covered, rows);
            assert_eq!(set.gather(&s).unwrap(), x, "{rows} rows, {split:?}");
        }
    }
    let ranges = set
        .split_rows(1000, &Split::Shares(vec![1.0, 3.0]))
        .unwrap();
    assert_eq!(ranges, vec![0..250, 250..1000]);
    let data = random_f32(12345, 9);
    let replicas = set.broadcast(&data, "b").unwrap();
    for (i, r) in replicas.iter().enumerate() {
        assert_eq!(set.device(i).download(r).unwrap(), data);
    }
    let copies = set.replicate(&replicas[1], "r").unwrap();
    for (i, r) in copies.iter().enumerate() {
        assert_eq!(set.device(i).download(r).unwrap(), data);
    }
}

/// Both algorithms, on two devices and on three (rows of 64 KiB there: pieces by the
/// dozen, segments of uneven lengths), sum within the stated bound, integers exactly, the
/// same bits on every device; the default sums on the GPUs wherever the devices import
/// host memory.
#[test]
fn all_reduce_sums_within_the_stated_bound_and_integers_exactly() {
    let set = set();
    let shared = set.shares_host_memory(0, 1).unwrap();
    eprintln!("devices import host memory: {shared}");
    // The default: on the GPUs where they import host memory; the ring on CPU adapters.
    let fastest = match shared && !set.device(0).gpu().is_cpu() {
        true => AllReduceAlgorithm::HostRows,
        false => AllReduceAlgorithm::Ring,
    };
    sums_within_the_bound(set, fastest);
    // Host rows wherever the devices import host memory, else the ring.
    let rows_or_ring = match shared {
        true => AllReduceAlgorithm::HostRows,
        false => AllReduceAlgorithm::Fastest,
    };
    let ring = on_the_same_gpus(
        set,
        TransferConfig {
            all_reduce: AllReduceAlgorithm::Ring,
            ..Default::default()
        },
    );
    sums_within_the_bound(&ring, AllReduceAlgorithm::Ring);
    let three = DeviceSet::open_with(&DeviceSetOptions {
        count: Some(3),
        transfer: TransferConfig {
            chunk: Some(64 << 10),
            all_reduce: rows_or_ring,
            ..Default::default()
        },
        ..DeviceSetOptions::from_env().unwrap()
    })
    .unwrap();
    let expect = match shared {
        true => AllReduceAlgorithm::HostRows,
        false => AllReduceAlgorithm::Ring,
    };
    sums_within_the_bound(&three, expect);
    if shared {
        // Asked for by name, where every device imports host memory.
        let rows = on_the_same_gpus(
            set,
            TransferConfig {
                all_reduce: AllReduceAlgorithm::HostRows,
                chunk: Some(4 << 10),
                ..Default::default()
            },
        );
        sums_within_the_bound(&rows, AllReduceAlgorithm::HostRows);
    } else {
        // Asked for where a device does not import host memory: an error, nothing moved.
        let rows = on_the_same_gpus(
            set,
            TransferConfig {
                all_reduce: AllReduceAlgorithm::HostRows,
                ..Default::default()
            },
        );
        let parts: Vec<Vec<f32>> = (0..2).map(|d| random_f32(100, 90 + d)).collect();
        let replicas = per_device(&rows, &parts, "refused");
        let err = rows.all_reduce_sum(&replicas).unwrap_err();
        assert!(err.to_string().contains("host memory"), "{err}");
        for (d, r) in replicas.iter().enumerate() {
            assert_eq!(rows.device(d).download(r).unwrap(), parts[d]);
        }
    }
}

/// The checks of the test above on `set`, whose all-reduces must run as `expect`.
fn sums_within_the_bound(set: &DeviceSet, expect: AllReduceAlgorithm) {
    for (seed, len) in [
        (1u64, 1usize),
        (2, 3),
        (3, 1000),
        (4, (9 << 20) / 4 + 5),
        (5, 600_000),
    ] {
        let parts: Vec<Vec<f32>> = (0..set.len())
            .map(|d| random_f32(len, seed * 7 + d as u64))
            .collect();
        let replicas = per_device(set, &parts, "grad");
        let report = set.all_reduce_sum(&replicas).unwrap();
        assert_eq!(report.bytes, len as u64 * 4);
        assert_eq!(report.algorithm, expect);
        let first = set.device(0).download(&replicas[0]).unwrap();
        for (d, r) in replicas.iter().enumerate() {
            let got = set.device(d).download(r).unwrap();
            // The same sum, bit for bit, on every device.
            assert!(
                got.iter()
                    .zip(&first)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "device {d}"
            );
            for i in 0..len {
                let exact: f64 = parts.iter().map(|p| p[i] as f64).sum();
                let magnitude: f64 = parts.iter().map(|p| (p[i] as f64).abs()).sum();
                let bound = (set.len() - 1) as f64 * f32::EPSILON as f64 / 2.0 * magnitude + 1e-30;
                assert!(
                    (got[i] as f64 - exact).abs() <= bound,
                    "{len}: [{i}] {} vs {exact}",
                    got[i]
                );
            }
        }
    }
    // A bucket of three arrays, one of them empty, sums as the arrays one by one would.
    let lens = [1000usize, 0, 77_777];
    let parts: Vec<Vec<Vec<f32>>> = (0..set.len())
        .map(|d| {
            lens.iter()
                .enumerate()
                .map(|(k, &n)| random_f32(n, 50 + 10 * d as u64 + k as u64))
                .collect()
        })
        .collect();
    let arrays: Vec<Vec<_>> = parts
        .iter()
        .enumerate()
        .map(|(d, per)| {
            per.iter()
                .filter(|p| !p.is_empty())
                .map(|p| set.device(d).alloc_from(p, "bucketed").unwrap())
                .collect()
        })
        .collect();
    let buckets: Vec<Vec<_>> = arrays.iter().map(|list| list.iter().collect()).collect();
    let report = set.all_reduce_sum_bucket(&buckets).unwrap();
    assert_eq!(report.bytes, (1000 + 77_777) * 4);
    assert_eq!(report.algorithm, expect);
    let filled: Vec<usize> = lens.iter().copied().filter(|&n| n > 0).collect();
    for (d, list) in arrays.iter().enumerate() {
        for (k, a) in list.iter().enumerate() {
            let got = set.device(d).download(a).unwrap();
            let which = if k == 0 { 0 } else { 2 };
            assert_eq!(got.len(), filled[k]);
            for (i, g) in got.iter().enumerate() {
                let exact: f64 = parts.iter().map(|p| p[which][i] as f64).sum();
                let magnitude: f64 = parts.iter().map(|p| (p[which][i] as f64).abs()).sum();
                assert!((*g as f64 - exact).abs() <= f32::EPSILON as f64 * magnitude + 1e-30);
            }
        }
    }
    // Lists of different lengths on the two devices are refused.
    let mut uneven: Vec<Vec<_>> = buckets.clone();
    uneven[1].truncate(1);
    assert!(set.all_reduce_sum_bucket(&uneven).is_err());
    // Integer values: exact.
    let ints: Vec<Vec<f32>> = (0..set.len())
        .map(|d| {
            (0..5000)
                .map(|i| ((i * 37 + d * 1001) % 100_000) as f32 - 50_000.0)
                .collect()
        })
        .collect();
    let replicas = per_device(set, &ints, "ints");
    set.all_reduce_sum(&replicas).unwrap();
    for (d, r) in replicas.iter().enumerate() {
        let got = set.device(d).download(r).unwrap();
        for (i, g) in got.iter().enumerate() {
            let exact: f32 = ints.iter().map(|p| p[i]).sum();
            assert_eq!(*g, exact, "device {d} [{i}]");
        }
    }
}

#[test]
fn misuse_is_a_typed_error_naming_the_device_and_loses_nothing() {
    let set = set();
    let x = set.device(0).alloc::<f32>(64, "x").unwrap();
    let y = set.device(1).alloc::<f32>(64, "y").unwrap();
    // Out of range, unaligned.
    assert!(set
        .copy((x.allocation(), 0), (y.allocation(), 4), 256)
        .is_err());
    assert!(set
        .copy((x.allocation(), 2), (y.allocation(), 0), 8)
        .is_err());
    // Arrays in the wrong order, of different lengths.
    let swapped = [
        set.device(1).alloc::<f32>(64, "on 1").unwrap(),
        set.device(0).alloc::<f32>(64, "on 0").unwrap(),
    ];
    assert!(set.all_reduce_sum(&swapped).is_err());
    let uneven = [
        set.device(0).alloc::<f32>(64, "64").unwrap(),
        set.device(1).alloc::<f32>(65, "65").unwrap(),
    ];
    assert!(set.all_reduce_sum(&uneven).is_err());
    // An allocation of a device outside the set.
    let outsider = vramkit::Runtime::new(common::gpu(), RuntimeConfig::default()).unwrap();
    let z = outsider.alloc::<f32>(64, "outsider").unwrap();
    let err = set
        .copy((z.allocation(), 0), (y.allocation(), 0), 256)
        .unwrap_err();
    assert!(err.to_string().contains("no device of this set"), "{err}");
    // A shard that does not fit its device's budget names the device; nothing stays.
    let mut config = RuntimeConfig::default();
    config.arena.budget = Budget::Bytes(8 << 20);
    let small = DeviceSet::open_with(&DeviceSetOptions {
        count: Some(2),
        runtime: config,
        ..DeviceSetOptions::from_env().unwrap()
    })
    .unwrap();
    let err = small
        .alloc_sharded::<f32>(4 << 20, 1, &Split::Shares(vec![1.0, 3.0]), "big")
        .unwrap_err();
    match &err {
        Error::OnDevice {
            device: 1, source, ..
        } => {
            assert!(matches!(**source, Error::OutOfMemory(_)), "{err}")
        }
        other => panic!("expected OnDevice(1, OutOfMemory), got {other}"),
    }
    assert_eq!(small.ledger().allocated(), 0);
    // By free memory: device 0 holds 6 of its 8 MiB, so device 1 takes most rows.
    let _held = small.device(0).alloc::<u8>(6 << 20, "held").unwrap();
    let parts = small.split_rows(1000, &Split::FreeMemory).unwrap();
    assert!(parts[1].len() > 3 * parts[0].len(), "{parts:?}");
}

#[test]
fn a_lost_device_fails_its_own_work_and_the_other_continues() {
    common::gpu();
    let mut set = fresh_set(2);
    if set.shares_host_memory(0, 1).unwrap() {
        // The all-reduce below on host rows, on a CPU adapter too.
        set.set_transfer(TransferConfig {
            all_reduce: AllReduceAlgorithm::HostRows,
            ..Default::default()
        });
    }
    let data = random_f32(4096, 5);
    let on0 = set.device(0).alloc_from(&data, "x").unwrap();
    let on1 = set.device(1).alloc::<f32>(4096, "y").unwrap();
    set.copy_typed(&on0, &on1).unwrap();
    assert_eq!(set.device(1).download(&on1).unwrap(), data);
    // An all-reduce before the loss keeps its host rows (where the devices import host
    // memory): the one after runs into the lost device mid-way.
    let grads = set.broadcast(&data, "grads").unwrap();
    set.all_reduce_sum(&grads).unwrap();
    set.device(1).gpu().device().destroy();
    let lost_on_1 = |err: &Error| match err {
        Error::OnDevice {
            device: 1, source, ..
        } => {
            assert!(matches!(**source, Error::DeviceLost { .. }), "{err}")
        }
        other => panic!("expected OnDevice(1, DeviceLost), got {other}"),
    };
    lost_on_1(&set.copy_typed(&on0, &on1).unwrap_err());
    lost_on_1(&set.all_reduce_sum(&grads).unwrap_err());
    // Device 0 goes on.
    let y = set.device(0).alloc::<f32>(4096, "y0").unwrap();
    let mut batch = set.device(0).batch();
    batch.fill(1.0, &y).unwrap().axpy(2.0, &on0, &y).unwrap();
    batch.submit().unwrap();
    let got = set.device(0).download(&y).unwrap();
    for (g, x) in got.iter().zip(&data) {
        assert!((g - (1.0 + 2.0 * x)).abs() <= 1e-6);
    }
}

/// Installs a simulated driver on `gpu`: 256 MiB for the process less what `neighbour`
/// holds, and the process's usage what `arena` reserves (the reader runs with no lock
/// held). Tests remove it at their end (it holds the arena).
fn simulate_driver(
    gpu: &vramkit::Gpu,
    arena: &vramkit::Arena,
    neighbour: &Arc<std::sync::atomic::AtomicU64>,
) {
    let seen = neighbour.clone();
    let ours = arena.clone();
    gpu.set_driver_memory_reader(Some(Arc::new(move || {
        let total = 256u64 << 20;
        Some(DriverMemory {
            budget: total - seen.load(std::sync::atomic::Ordering::Relaxed),
            usage: ours.stats().reserved,
            total,
            source: "test",
        })
    })));
}

#[test]
fn a_live_budget_follows_the_driver_and_gives_cache_back() {
    common::gpu();
    let set = fresh_set(1);
    let rt = set.device(0);
    // A simulated driver: 256 MiB budget for this process, until a neighbour takes 192.
    let neighbour = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let arena = rt.arena().clone();
    simulate_driver(rt.gpu(), &arena, &neighbour);
    let limit = arena.set_budget(Budget::FractionOfAvailable(0.5)).unwrap();
    assert_eq!(limit, Some(128 << 20));
    assert!(arena.is_budget_live());
    // Fill to 96 MiB, drop it all: the arena keeps it as cache.
    let blocks: Vec<_> = (0..6)
        .map(|i| arena.alloc(16 << 20, &format!("b{i}")).unwrap())
        .collect();
    drop(blocks);
    arena.synchronize().unwrap();
    assert!(arena.stats().reserved >= 96 << 20);
    // The neighbour takes 192 MiB: the budget falls to 32 MiB and the cache goes back.
    neighbour.store(192 << 20, std::sync::atomic::Ordering::Relaxed);
    let limit = arena.refresh_budget().unwrap().unwrap();
    assert_eq!(limit, 32 << 20);
    assert!(arena.stats().reserved <= limit, "{}", arena.summary());
    assert!(
        arena.summary().contains("live: driver allows"),
        "{}",
        arena.summary()
    );
    // Work within the new budget goes on; beyond it is a typed error, not a crash.
    let small = arena.alloc(8 << 20, "small").unwrap();
    assert!(matches!(
        arena.alloc(64 << 20, "too big"),
        Err(Error::OutOfMemory(_))
    ));
    drop(small);
    // The neighbour leaves: the budget comes back.
    neighbour.store(0, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(arena.refresh_budget().unwrap(), Some(128 << 20));
    rt.gpu().set_driver_memory_reader(None);
}

#[test]
fn a_shrinking_live_budget_spills_movables_to_the_host_and_keeps_their_bytes() {
    common::gpu();
    // A device of its own: a reader installed on the shared test GPU would reach the
    // other tests' arenas too.
    let gpu = vramkit::Gpu::headless().unwrap();
    let rt = vramkit::Runtime::new(&gpu, RuntimeConfig::default()).unwrap();
    let arena = rt.arena().clone();
    let tiers = vramkit::tier::Tiers::new(&arena, Default::default()).unwrap();
    let neighbour = Arc::new(std::sync::atomic::AtomicU64::new(0));
    simulate_driver(&gpu, &arena, &neighbour);
    arena.set_budget(Budget::FractionOfAvailable(0.5)).unwrap();
    let data: Vec<Vec<f32>> = (0..6).map(|i| random_f32(4 << 20, 100 + i)).collect();
    let movables: Vec<_> = data
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let m = tiers.alloc(16 << 20, &format!("m{i}")).unwrap();
            let resident = tiers.make_resident(&[&m]).unwrap();
            rt.upload(resident.elements::<f32>(&m).unwrap(), d).unwrap();
            drop(resident);
            m
        })
        .collect();
    rt.arena().synchronize().unwrap();
    assert!(arena.stats().reserved >= 96 << 20);
    // The neighbour takes 192 MiB: 32 MiB is left for this arena.
    neighbour.store(192 << 20, std::sync::atomic::Ordering::Relaxed);
    let limit = arena.refresh_budget().unwrap().unwrap();
    assert_eq!(limit, 32 << 20);
    // The tiers spilled; once their copies are done the emptied blocks go back.
    arena.synchronize().unwrap();
    arena.refresh_budget().unwrap();
    assert!(
        arena.stats().reserved <= 32 << 20,
        "{}\n{:?}",
        arena.summary(),
        tiers.stats()
    );
    assert!(tiers.stats().evictions > 0, "{:?}", tiers.stats());
    // Every movable still holds its bytes, brought back one at a time.
    for (m, d) in movables.iter().zip(&data) {
        let resident = tiers.make_resident(&[m]).unwrap();
        assert_eq!(
            &rt.download(resident.elements::<f32>(m).unwrap()).unwrap(),
            d
        );
    }
    gpu.set_driver_memory_reader(None);
}

/// An allocation over a live budget reads the driver again before it fails: memory a
/// neighbour gave back since the last reading serves it, however long the interval
/// between readings. Without that, the allocation failed until the next periodic reading.
#[test]
fn an_allocation_over_a_stale_live_budget_reads_the_driver_before_failing() {
    common::gpu();
    // A device of its own: the reader must reach this arena only.
    let gpu = vramkit::Gpu::headless().unwrap();
    let arena = vramkit::Arena::new(
        &gpu,
        vramkit::ArenaConfig {
            budget_refresh: std::time::Duration::from_secs(3600),
            ..Default::default()
        },
    )
    .unwrap();
    let neighbour = Arc::new(std::sync::atomic::AtomicU64::new(192 << 20));
    simulate_driver(&gpu, &arena, &neighbour);
    // Half of the 64 MiB the neighbour leaves.
    assert_eq!(
        arena.set_budget(Budget::FractionOfAvailable(0.5)).unwrap(),
        Some(32 << 20)
    );
    let small = arena.alloc(8 << 20, "small").unwrap();
    // Still over after reading again: a typed error, and the arena goes on.
    assert!(matches!(
        arena.alloc(64 << 20, "too big"),
        Err(Error::OutOfMemory(_))
    ));
    // The neighbour leaves; no periodic reading is due for an hour.
    neighbour.store(0, std::sync::atomic::Ordering::Relaxed);
    let big = arena
        .alloc(64 << 20, "fits now")
        .unwrap_or_else(|e| panic!("{e}\n{}", arena.summary()));
    assert_eq!(arena.budget(), Some(128 << 20));
    drop((small, big));
    gpu.set_driver_memory_reader(None);
}

/// The allocation path takes a new reading once `budget_refresh` has passed, and not
/// before (the test of whether one is due is an atomic load and a clock stamp).
#[test]
fn allocations_read_a_live_budget_again_once_a_reading_is_due() {
    common::gpu();
    let gpu = vramkit::Gpu::headless().unwrap();
    let refresh = std::time::Duration::from_millis(50);
    let arena = vramkit::Arena::new(
        &gpu,
        vramkit::ArenaConfig {
            budget_refresh: refresh,
            ..Default::default()
        },
    )
    .unwrap();
    let neighbour = Arc::new(std::sync::atomic::AtomicU64::new(0));
    simulate_driver(&gpu, &arena, &neighbour);
    let start = std::time::Instant::now();
    arena.set_budget(Budget::FractionOfAvailable(0.5)).unwrap();
    assert_eq!(arena.budget(), Some(128 << 20));
    neighbour.store(128 << 20, std::sync::atomic::Ordering::Relaxed);
    drop(arena.alloc(4096, "not due").unwrap());
    if start.elapsed() < refresh {
        // Read by set_budget less than the interval ago: not read again.
        assert_eq!(arena.budget(), Some(128 << 20));
    }
    std::thread::sleep(refresh + std::time::Duration::from_millis(10));
    drop(arena.alloc(4096, "due").unwrap());
    assert_eq!(arena.budget(), Some(64 << 20), "{}", arena.summary());
    gpu.set_driver_memory_reader(None);
}

/// Issue 61, reproduction 4: whole-array copies of any element type and length (an odd
/// number of `f16` is not a whole number of words: the arena rounds the allocation up,
/// and the copy moves the covering words), and a same-device copy between overlapping
/// ranges of one allocation lands as a `memmove` would (before: "offsets and lengths
/// must be multiples of 4", and half the values wrong on lavapipe).
#[test]
fn whole_arrays_of_any_length_and_overlapping_copies_on_one_device() {
    use half::f16;
    let set = set();
    let mut rng = common::rng();
    let n = 2 * rng.gen_range(100..5000) + 1;
    let x: Vec<f16> = (0..n)
        .map(|_| f16::from_f32(rng.gen_range(-8.0f32..8.0)))
        .collect();
    let src = set.device(0).alloc_from(&x, "odd f16").unwrap();
    let replicas = set.replicate(&src, "replica").unwrap();
    for (d, r) in replicas.iter().enumerate() {
        assert_eq!(
            set.device(d).download(r).unwrap(),
            x,
            "replica on device {d}"
        );
    }
    let there = set.device(1).alloc::<f16>(n, "there").unwrap();
    set.copy_typed(&src, &there).unwrap();
    assert_eq!(set.device(1).download(&there).unwrap(), x);
    // Overlapping ranges of one allocation, both directions.
    let words = 10 << 20; // more than a CPU adapter's four chunks of 4 MiB in flight
    for (from, to) in [(0u64, 4096u64), (4096, 0), (0, 13 << 20), (8, 0)] {
        let data: Vec<u32> = (0..words).map(|_| rng.gen()).collect();
        let a = set.device(0).alloc_from(&data, "overlap").unwrap();
        let len = 4 * words as u64 - from.max(to);
        set.copy((a.allocation(), from), (a.allocation(), to), len)
            .unwrap();
        let mut expected = bytemuck::cast_slice::<u32, u8>(&data).to_vec();
        expected.copy_within(from as usize..(from + len) as usize, to as usize);
        let got = set.device(0).download(&a).unwrap();
        assert!(
            bytemuck::cast_slice::<u32, u8>(&got) == expected.as_slice(),
            "copy {from} -> {to}, {len} bytes, on one device"
        );
    }
}

/// Issue 61: the links between devices (pinned host memory, 256 MiB each on GPUs) go
/// when trimmed, and the next copy makes one again.
#[test]
fn idle_links_are_trimmed_and_made_again() {
    let set = fresh_set(2);
    let x = random_f32(1 << 16, 7);
    let a = set.device(0).alloc_from(&x, "a").unwrap();
    let b = set.device(1).alloc::<f32>(x.len(), "b").unwrap();
    set.copy_typed(&a, &b).unwrap();
    assert_eq!(set.trim(), 1, "the link the copy used, idle now");
    assert_eq!(set.trim(), 0);
    let c = set.device(1).alloc::<f32>(x.len(), "c").unwrap();
    set.copy_typed(&a, &c).unwrap();
    assert_eq!(set.device(1).download(&c).unwrap(), x);
}

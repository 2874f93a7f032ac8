//! Arrays over the devices of a set: [`Sharded`] (split along the leading axis), scatter
//! and gather, broadcast, and the all-reduce.
//!
//! # How it works
//! - **Splits.** `rows` rows of `row_len` elements are cut at
//!   `round(rows x cumulative share)`: evenly, by the shares given, or by each device's free
//!   memory in the ledger ([`Split::FreeMemory`]). A device whose share is 0 rows holds no
//!   shard. A shard that does not fit its device's budget fails with
//!   [`Error::OnDevice`] around the out-of-memory error, and nothing stays allocated.
//! - **Scatter, gather, broadcast** move each device's part on a thread of its own, so
//!   the host's links to the GPUs run at once.
//! - **All-reduce (sum, f32)** is a ring: the array is cut into one segment per device;
//!   in `N - 1` reduce-scatter steps every device sends one segment to the next through
//!   the set's copies (all `N` copies at once, each GPU uploading and downloading at the
//!   same time) and the receiver adds it into its own copy with the `axpy` kernel; in
//!   `N - 1` all-gather steps the finished segments travel round the ring. Each device
//!   sends and receives `2 (N - 1) / N` of the array in all, the least any all-reduce
//!   moves; the rate is reported as NCCL reports it, algorithm bytes per second (array
//!   bytes / time) and bus bytes per second (that times `2 (N - 1) / N`).
//!
//! # Numerics
//! Every element of the result is the same sum on every device, added in ring order: for
//! segment `k`, starting at device `k + 1`, then `k + 2`, ... The order is fixed for a
//! given device count, so results repeat bit for bit; against the exact sum the error is
//! at most `(N - 1) u sum|x_i|` (u = 2^-24), and sums of integers below 2^24 in
//! magnitude are exact.

use std::ops::Range;

use web_time::Instant;

use super::{on_device, DeviceSet};
use crate::arena::Typed;
use crate::{Error, Result};

/// The pool of each device's arena that holds an all-reduce's running sums.
const SUM_POOL: &str = "vramkit all-reduce";

/// How [`DeviceSet::scatter`] and [`DeviceSet::alloc_sharded`] divide rows.
#[derive(Clone, Debug, PartialEq)]
pub enum Split {
    /// As equally as whole rows allow.
    Even,
    /// In proportion to these weights, one per device (non-negative, not all 0).
    Shares(Vec<f64>),
    /// In proportion to each device's free memory now ([`super::DeviceUsage::free`]).
    FreeMemory,
}

/// One device's part of a [`Sharded`] array.
#[derive(Debug)]
pub struct Shard<T: bytemuck::Pod> {
    /// The device's index in the set.
    pub device: usize,
    /// The rows of the whole array it holds.
    pub rows: Range<usize>,
    /// Its rows, row-major.
    pub data: Typed<T>,
}

/// A typed array of `rows x row_len` elements split along its rows over the devices of a
/// set; see the module docs.
#[derive(Debug)]
pub struct Sharded<T: bytemuck::Pod> {
    shards: Vec<Shard<T>>,
    rows: usize,
    row_len: usize,
}

impl<T: bytemuck::Pod> Sharded<T> {
    /// Rows of the whole array.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Elements per row.
    pub fn row_len(&self) -> usize {
        self.row_len
    }

    /// The shards, in device order (devices with no rows have none).
    pub fn shards(&self) -> &[Shard<T>] {
        &self.shards
    }

    /// The shard on `device`, if it holds rows.
    pub fn shard_on(&self, device: usize) -> Option<&Shard<T>> {
        self.shards.iter().find(|s| s.device == device)
    }
}

/// What an all-reduce moved and how fast; see the module docs.
#[derive(Clone, Copy, Debug)]
pub struct AllReduceReport {
    /// Bytes of the array (on each device).
    pub bytes: u64,
    /// Wall time from the call to the last byte landed.
    pub seconds: f64,
    /// Devices.
    pub devices: usize,
    /// Of `seconds`, the reduce-scatter's copies and additions.
    pub reduce_scatter_seconds: f64,
}

impl AllReduceReport {
    /// Array bytes per second, in GB/s (NCCL's "algbw").
    pub fn algorithm_gbps(&self) -> f64 {
        self.bytes as f64 / self.seconds.max(1e-12) / 1e9
    }

    /// What each device's links carried, in GB/s (NCCL's "busbw": algbw x 2 (N - 1) / N).
    pub fn bus_gbps(&self) -> f64 {
        let n = self.devices as f64;
        self.algorithm_gbps() * 2.0 * (n - 1.0) / n
    }
}

impl DeviceSet {
    /// The rows each device gets when `rows` rows are split as `split` says: one range per
    /// device, in device order (empty for a device with no share).
    pub fn split_rows(&self, rows: usize, split: &Split) -> Result<Vec<Range<usize>>> {
        let n = self.len();
        let weights: Vec<f64> = match split {
            Split::Even => vec![1.0; n],
            Split::Shares(w) => {
                if w.len() != n {
                    return Err(Error::invalid(
                        format!("{} shares for a set of {n} devices", w.len()),
                        "give one share per device",
                    ));
                }
                w.clone()
            }
            Split::FreeMemory => {
                let ledger = self.ledger();
                let free: Option<Vec<u64>> = ledger.devices.iter().map(|d| d.free()).collect();
                let free = free.ok_or_else(|| {
                    Error::invalid(
                        "a split by free memory on devices that report neither a budget nor \
                         their memory size",
                        "give the arenas a budget (RuntimeConfig::arena.budget), or split \
                         with Split::Even or Split::Shares",
                    )
                })?;
                free.into_iter().map(|f| f as f64).collect()
            }
        };
        let total: f64 = weights.iter().sum();
        if weights.iter().any(|w| !w.is_finite() || *w < 0.0) || total <= 0.0 {
            return Err(Error::invalid(
                format!("shares {weights:?}"),
                "shares must be finite, non-negative and not all 0",
            ));
        }
        let mut cumulative = 0.0;
        let mut start = 0;
        Ok(weights
            .iter()
            .enumerate()
            .map(|(i, w)| {
                cumulative += w;
                let end = if i + 1 == n {
                    rows
                } else {
                    ((rows as f64 * cumulative / total).round() as usize).clamp(start, rows)
                };
                let r = start..end;
                start = end;
                r
            })
            .collect())
    }

    /// Room for `rows x row_len` elements of `T` split over the devices (contents
    /// undefined).
    pub fn alloc_sharded<T: bytemuck::Pod>(
        &self,
        rows: usize,
        row_len: usize,
        split: &Split,
        label: &str,
    ) -> Result<Sharded<T>> {
        let parts = self.split_rows(rows, split)?;
        let mut shards = Vec::new();
        for (device, r) in parts.into_iter().enumerate() {
            if r.is_empty() || row_len == 0 {
                continue;
            }
            let rt = self.device(device);
            let len = (r.end - r.start).checked_mul(row_len).ok_or_else(|| {
                Error::invalid(
                    format!("a shard of {} rows of {row_len}", r.end - r.start),
                    "the shard's length overflows usize",
                )
            })?;
            let data = rt
                .alloc::<T>(len, label)
                .map_err(|e| on_device(device, &rt.gpu().info().name, e))?;
            shards.push(Shard {
                device,
                rows: r,
                data,
            });
        }
        Ok(Sharded {
            shards,
            rows,
            row_len,
        })
    }

    /// `data` (`rows x row_len`, row-major) split over the devices as `split` says and
    /// uploaded, each device's part on a thread of its own.
    ///
    /// ```no_run
    /// use vramkit::devices::{DeviceSet, Split};
    /// let set = DeviceSet::open()?;
    /// let x: Vec<u32> = (0..4096 * 256).collect();
    /// let s = set.scatter(&x, 256, &Split::Even, "x")?;
    /// for shard in s.shards() {
    ///     println!("device {} holds rows {:?}", shard.device, shard.rows);
    /// }
    /// assert_eq!(set.gather(&s)?, x);
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn scatter<T: bytemuck::Pod + Send + Sync>(
        &self,
        data: &[T],
        row_len: usize,
        split: &Split,
        label: &str,
    ) -> Result<Sharded<T>> {
        if row_len == 0 || !data.len().is_multiple_of(row_len) {
            return Err(Error::invalid(
                format!("{} elements in rows of {row_len}", data.len()),
                "pass a whole number of rows (row_len > 0)",
            ));
        }
        let sharded = self.alloc_sharded::<T>(data.len() / row_len, row_len, split, label)?;
        self.each_shard(&sharded, |shard| {
            let part = &data[shard.rows.start * row_len..shard.rows.end * row_len];
            self.device(shard.device).upload(&shard.data, part)
        })?;
        Ok(sharded)
    }

    /// The whole array back on the host, each shard downloaded on a thread of its own.
    pub fn gather<T: bytemuck::Pod + Send + Sync>(&self, sharded: &Sharded<T>) -> Result<Vec<T>> {
        let parts = self.each_shard(sharded, |shard| {
            self.device(shard.device).download(&shard.data)
        })?;
        Ok(parts.concat())
    }

    /// `data` uploaded to every device (one allocation per device, in device order).
    pub fn broadcast<T: bytemuck::Pod + Send + Sync>(
        &self,
        data: &[T],
        label: &str,
    ) -> Result<Vec<Typed<T>>> {
        let replicas = self.per_device(|_, rt| rt.alloc::<T>(data.len(), label))?;
        self.parallel(replicas.len(), |i| {
            self.device(i).upload(&replicas[i], data)
        })?;
        Ok(replicas)
    }

    /// Copies of `src` (on one device of the set) on every device, in device order; the
    /// source's own device gets a copy too. The copies go device to device
    /// ([`copy`](Self::copy)), all at once.
    pub fn replicate<T: bytemuck::Pod>(
        &self,
        src: &Typed<T>,
        label: &str,
    ) -> Result<Vec<Typed<T>>> {
        let from = self.device_of(src.allocation())?;
        let replicas = self.per_device(|_, rt| rt.alloc::<T>(src.len(), label))?;
        self.parallel(replicas.len(), |i| {
            if i == from {
                // On the source's device: the copy kernel (a buffer copy refuses source
                // and destination in one arena block).
                let bytes = (src.len() * std::mem::size_of::<T>()) as u64;
                let mut batch = self.device(i).kernels().batch();
                batch.copy(
                    bytes.div_ceil(4),
                    src.allocation(),
                    replicas[i].allocation(),
                )?;
                batch.submit().map(|_| ())
            } else {
                self.copy_typed(src, &replicas[i])
            }
        })?;
        Ok(replicas)
    }

    /// Sums `replicas` (one f32 array per device, in device order, all the same length)
    /// element by element and leaves the sum in every one of them; see the module docs
    /// for the ring, the rate and the numerics.
    ///
    /// ```no_run
    /// use vramkit::devices::DeviceSet;
    /// let set = DeviceSet::open()?;
    /// let grads = set.broadcast(&vec![1.0f32; 1 << 20], "grad")?;
    /// let report = set.all_reduce_sum(&grads)?;
    /// assert_eq!(set.device(0).download(&grads[0])?[0], set.len() as f32);
    /// println!("{:.1} GB/s", report.algorithm_gbps());
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn all_reduce_sum<'a>(
        &self,
        arrays: impl IntoIterator<Item = &'a Typed<f32>>,
    ) -> Result<AllReduceReport> {
        let replicas: Vec<&Typed<f32>> = arrays.into_iter().collect();
        let n = self.len();
        if replicas.len() != n {
            return Err(Error::invalid(
                format!(
                    "{} arrays for an all-reduce over {n} devices",
                    replicas.len()
                ),
                "pass one array per device, in device order",
            ));
        }
        for (i, r) in replicas.iter().enumerate() {
            let on = self.device_of(r.allocation())?;
            if on != i {
                return Err(Error::invalid(
                    format!(
                        "array {i} of the all-reduce ('{}') lives on device {on}",
                        r.allocation().label()
                    ),
                    "pass one array per device, in device order",
                ));
            }
            if r.len() != replicas[0].len() {
                return Err(Error::invalid(
                    format!(
                        "all-reduce arrays of {} and {} elements",
                        replicas[0].len(),
                        r.len()
                    ),
                    "every device's array must have the same length",
                ));
            }
        }
        let len = replicas[0].len();
        let start = Instant::now();
        let report = |start: Instant, reduce_scatter_seconds: f64| AllReduceReport {
            bytes: (len * 4) as u64,
            seconds: start.elapsed().as_secs_f64(),
            devices: n,
            reduce_scatter_seconds,
        };
        if n == 1 || len == 0 {
            return Ok(report(start, 0.0));
        }
        log::debug!("all-reduce of {len} floats: checks {:?}", start.elapsed());
        let segments: Vec<Range<usize>> = (0..n).map(|k| k * len / n..(k + 1) * len / n).collect();
        let widest = segments.iter().map(|s| s.len()).max().unwrap_or(0).max(1);
        let scratch = self.per_device(|_, rt| rt.alloc::<f32>(widest, "all-reduce: received"))?;
        // In a pool of their own: the segment is copied between the array and its sum
        // with buffer copies, which refuse source and destination in one buffer.
        let sums = self.per_device(|_, rt| {
            let arena = rt.arena();
            let pool = match arena.pool(SUM_POOL) {
                Some(pool) => pool,
                None => arena
                    .add_pool(SUM_POOL, Default::default())
                    .or_else(|e| arena.pool(SUM_POOL).ok_or(e))?,
            };
            arena
                .alloc_in(pool, widest as u64 * 4, "all-reduce: sum")?
                .typed::<f32>()
        })?;
        log::debug!("all-reduce: scratch allocated {:?}", start.elapsed());
        for (d, r) in replicas.iter().enumerate() {
            if r.allocation().buffer() == sums[d].allocation().buffer() {
                return Err(Error::invalid(
                    format!(
                        "all-reduce array '{}' lies in the pool '{SUM_POOL}'",
                        r.allocation().label()
                    ),
                    "allocate the arrays of an all-reduce from another pool",
                ));
            }
        }
        let bytes = |r: &Range<usize>| (r.start as u64 * 4, r.len() as u64 * 4);
        // Reduce-scatter: at step s device i sends segment (i - s) mod n to i + 1, which
        // adds it into its own.
        for step in 0..n - 1 {
            let segment = |i: usize| &segments[(i + n - step) % n];
            for i in 0..n {
                let (offset, size) = bytes(segment(i));
                let to = (i + 1) % n;
                let t = Instant::now();
                self.copy(
                    (replicas[i].allocation(), offset),
                    (scratch[to].allocation(), 0),
                    size,
                )?;
                log::debug!(
                    "all-reduce: reduce-scatter step {step}, {i} -> {to}: {:?}",
                    t.elapsed()
                );
                if size > 0 {
                    self.add_into(to, replicas[to], segment(i), &scratch[to], &sums[to])?;
                }
            }
        }
        let reduce_scatter_seconds = start.elapsed().as_secs_f64();
        log::debug!("all-reduce: reduce-scatter done {:?}", start.elapsed());
        // All-gather: at step s device i sends its finished segment (i + 1 - s) mod n on.
        for step in 0..n - 1 {
            for i in 0..n {
                let (offset, size) = bytes(&segments[(i + 1 + n - step) % n]);
                let to = (i + 1) % n;
                self.copy(
                    (replicas[i].allocation(), offset),
                    (replicas[to].allocation(), offset),
                    size,
                )?;
            }
        }
        Ok(report(start, reduce_scatter_seconds))
    }

    /// On device `d`: `replica[seg] += received[..seg.len()]`, through `sum` (the kernels
    /// run on whole allocations, so the segment is copied out, added to and copied back).
    fn add_into(
        &self,
        d: usize,
        replica: &Typed<f32>,
        seg: &Range<usize>,
        received: &Typed<f32>,
        sum: &Typed<f32>,
    ) -> Result<()> {
        let rt = self.device(d);
        let name = || rt.gpu().info().name.clone();
        let (offset, size) = (seg.start as u64 * 4, seg.len() as u64 * 4);
        let (Some(received), Some(sum_part)) = (received.first(seg.len()), sum.first(seg.len()))
        else {
            return Err(Error::invalid(
                "an all-reduce segment wider than its scratch",
                "report this bug",
            ));
        };
        let mut batch = rt.batch();
        let r = replica.allocation();
        batch.untyped().encoder().copy_buffer_to_buffer(
            r.buffer(),
            r.offset() + offset,
            sum.allocation().buffer(),
            sum.allocation().offset(),
            size,
        );
        batch
            .axpy(1.0, received, sum_part)
            .map_err(|e| on_device(d, &name(), e))?;
        batch.untyped().encoder().copy_buffer_to_buffer(
            sum.allocation().buffer(),
            sum.allocation().offset(),
            r.buffer(),
            r.offset() + offset,
            size,
        );
        batch.submit().map_err(|e| on_device(d, &name(), e))?;
        Ok(())
    }

    /// One value per device, made in device order; the first error (naming its device)
    /// drops what was made.
    fn per_device<V>(
        &self,
        mut make: impl FnMut(usize, &crate::Runtime) -> Result<V>,
    ) -> Result<Vec<V>> {
        self.runtimes()
            .iter()
            .enumerate()
            .map(|(i, rt)| make(i, rt).map_err(|e| on_device(i, &rt.gpu().info().name, e)))
            .collect()
    }

    /// Runs `f(i)` for `i` in `0..n` on `n` threads at once; the first error wins.
    fn parallel<V: Send>(&self, n: usize, f: impl Fn(usize) -> Result<V> + Sync) -> Result<Vec<V>> {
        if n == 1 {
            return Ok(vec![f(0)?]);
        }
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..n)
                .map(|i| {
                    scope.spawn({
                        let f = &f;
                        move || f(i)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(Error::invalid(
                            "a device's thread panicked",
                            "see the panic message above",
                        ))
                    })
                })
                .collect()
        })
    }

    /// `f` on every shard of `sharded` at once, results in shard order.
    fn each_shard<T: bytemuck::Pod + Sync, V: Send>(
        &self,
        sharded: &Sharded<T>,
        f: impl Fn(&Shard<T>) -> Result<V> + Sync,
    ) -> Result<Vec<V>> {
        for shard in &sharded.shards {
            let on = self.device_of(shard.data.allocation())?;
            if on != shard.device {
                return Err(Error::invalid(
                    format!(
                        "a shard says device {} but lives on device {on}",
                        shard.device
                    ),
                    "pass a Sharded made by this set",
                ));
            }
        }
        self.parallel(sharded.shards.len(), |k| {
            let shard = &sharded.shards[k];
            f(shard).map_err(|e| {
                on_device(
                    shard.device,
                    &self.device(shard.device).gpu().info().name,
                    e,
                )
            })
        })
    }
}

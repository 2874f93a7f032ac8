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
//! - **All-reduce (sum, f32)** runs as [`AllReduceAlgorithm`] says. By default, where
//!   every device is a GPU that imports host memory, on the GPUs from host rows
//!   (`host_rows.rs`: each device publishes its values into host memory every device
//!   imports, and each GPU's kernel sums its segment reading the others' across the
//!   bus). Elsewhere, a ring: the array is cut into one segment per device;
//!   in `N - 1` reduce-scatter steps every device sends one segment to the next through
//!   the set's copies and the receiver adds it into its own copy with the `axpy` kernel;
//!   in `N - 1` all-gather steps the finished segments travel round the ring. Each device
//!   sends and receives `2 (N - 1) / N` of the array in all, the least any all-reduce
//!   moves. The copies run one at a time, each pipelined between its two devices: a
//!   device's one queue carries a download and an upload no faster together than one
//!   after the other (two H200s: 45-50 GB/s either way), and two threads waiting on one
//!   device at once stalled each other. The rate is reported as NCCL reports it: array
//!   bytes per second (algbw) and that times `2 (N - 1) / N` (busbw).
//! - **Buckets** ([`DeviceSet::all_reduce_sum_bucket`]) sum several arrays as one, as
//!   PyTorch's data-parallel training does with gradients: fewer, larger copies.
//!
//! # Numerics
//! Every element of the result is the same sum on every device, added in ring order: for
//! segment `k`, starting at device `k + 1`, then `k + 2`, ... (from host rows: in device
//! order from device 0, each segment summed once). The order is fixed for a
//! given device count, so results repeat bit for bit; against the exact sum the error is
//! at most `(N - 1) u sum|x_i|` (u = 2^-24), and sums of integers below 2^24 in
//! magnitude are exact.

use std::ops::Range;

use web_time::Instant;

use super::{host_rows, on_device, DeviceSet};
use crate::arena::Typed;
use crate::{Error, Result};

/// The pool of each device's arena that holds an all-reduce's running sums.
const SUM_POOL: &str = "vramkit all-reduce: sums";
/// The pool of the buckets of [`DeviceSet::all_reduce_sum_bucket`] (not the sums' pool:
/// a segment is copied between the two with buffer copies).
const BUCKET_POOL: &str = "vramkit all-reduce: buckets";

/// Fails if `array` lies in the same buffer as `scratch`, its device's buffer from `pool`
/// (only possible for arrays allocated from vramkit's own all-reduce pools): buffer copies
/// between the two would be refused.
fn same_buffer_refused(array: &Typed<f32>, scratch: &Typed<f32>, pool: &str) -> Result<()> {
    if array.allocation().buffer() == scratch.allocation().buffer() {
        return Err(Error::invalid(
            format!(
                "all-reduce array '{}' lies in the pool '{pool}'",
                array.allocation().label()
            ),
            "allocate the arrays of an all-reduce from another pool",
        ));
    }
    Ok(())
}

/// `len` floats from the pool `pool` of `rt`'s arena, which is added with default settings
/// the first time.
fn alloc_in_own_pool(
    rt: &crate::Runtime,
    pool: &str,
    len: usize,
    label: &str,
) -> Result<Typed<f32>> {
    let arena = rt.arena();
    let pool = match arena.pool(pool) {
        Some(id) => id,
        // Another thread may add it at the same moment: then take theirs.
        None => arena
            .add_pool(pool, Default::default())
            .or_else(|e| arena.pool(pool).ok_or(e))?,
    };
    arena.alloc_in(pool, len as u64 * 4, label)?.typed::<f32>()
}

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

/// How an all-reduce runs ([`TransferConfig::all_reduce`](super::TransferConfig)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AllReduceAlgorithm {
    /// [`HostRows`](Self::HostRows) where every device is a GPU that imports host memory
    /// (Vulkan with `VK_EXT_external_memory_host`) and every array can be bound as
    /// storage; else [`Ring`](Self::Ring). On a CPU adapter the ring's copies are host
    /// `memcpy`s, faster than a shader's loads and stores (lavapipe, two devices: the ring
    /// 0.4-0.6 GB/s, host rows 0.1-0.3).
    #[default]
    Fastest,
    /// The ring of the module docs: copies between devices through the set's links, the
    /// additions by `axpy` on each receiver.
    Ring,
    /// Each GPU sums its segment inside one kernel, reading the other devices' values
    /// from host memory every device imports: no copy on the host and no pass over
    /// device memory for the additions (`devices/host_rows.rs`). Where a device does not
    /// import host memory, asking for it is an error.
    HostRows,
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
    /// How it ran ([`Ring`](AllReduceAlgorithm::Ring) where there was nothing to move:
    /// one device, or empty arrays).
    pub algorithm: AllReduceAlgorithm,
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
                    return Err(Error::misuse(
                        crate::Misuse::Shape,
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
            return Err(Error::misuse(
                crate::Misuse::Shape,
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
        // One copy at a time (see the module docs: threads waiting on the source device
        // at once stall each other).
        (0..replicas.len()).try_for_each(|i| {
            if i == from {
                // On the source's device: the copy kernel (a buffer copy refuses source
                // and destination in one arena block).
                let bytes = (src.len() * std::mem::size_of::<T>()) as u64;
                let mut batch = self.device(i).kernels().batch();
                batch.copy_n(
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
        self.check_replicas(&replicas.iter().map(|r| vec![*r]).collect::<Vec<_>>())?;
        let start = Instant::now();
        let reduced = self.reduce(&replicas, start)?;
        Ok(self.report(replicas[0].len(), start, reduced))
    }

    /// [`all_reduce_sum`](Self::all_reduce_sum) of several arrays at once, as one: a
    /// *bucket*, as PyTorch's data-parallel training sums a model's gradients.
    /// `per_device[d]` lists device `d`'s arrays; every device lists arrays of the same
    /// lengths in the same order. Each device copies its arrays into one buffer (at its
    /// memory's speed), the ring sums that buffer, and the sums are copied back: fewer,
    /// larger copies between devices than one all-reduce per array.
    ///
    /// ```no_run
    /// use vramkit::devices::DeviceSet;
    /// let set = DeviceSet::open()?;
    /// let w1 = set.broadcast(&vec![1.0f32; 1 << 20], "dw1")?;
    /// let w2 = set.broadcast(&vec![2.0f32; 1 << 10], "dw2")?;
    /// let buckets: Vec<Vec<_>> = (0..set.len()).map(|d| vec![&w1[d], &w2[d]]).collect();
    /// set.all_reduce_sum_bucket(&buckets)?;
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn all_reduce_sum_bucket(
        &self,
        per_device: &[Vec<&Typed<f32>>],
    ) -> Result<AllReduceReport> {
        self.check_replicas(per_device)?;
        let start = Instant::now();
        let total: usize = per_device[0].iter().map(|a| a.len()).sum();
        if self.len() == 1 || total == 0 {
            return Ok(self.report(total, start, (0.0, AllReduceAlgorithm::Ring)));
        }
        let buckets = self
            .per_device(|_, rt| alloc_in_own_pool(rt, BUCKET_POOL, total, "all-reduce: bucket"))?;
        for (list, bucket) in per_device.iter().zip(&buckets) {
            for a in list {
                same_buffer_refused(a, bucket, BUCKET_POOL)?;
            }
        }
        // Into the buckets, the ring, and back out; each device's copies in one batch.
        let fill = |d: usize, into_bucket: bool| -> Result<()> {
            let rt = self.device(d);
            let mut batch = rt.batch();
            let bucket = buckets[d].allocation();
            let mut offset = 0u64;
            for a in &per_device[d] {
                let bytes = a.len() as u64 * 4;
                let (array, at) = (a.allocation(), a.allocation().offset());
                let encoder = batch.encoder();
                if into_bucket {
                    encoder.copy_buffer_to_buffer(
                        array.buffer(),
                        at,
                        bucket.buffer(),
                        bucket.offset() + offset,
                        bytes,
                    );
                } else {
                    encoder.copy_buffer_to_buffer(
                        bucket.buffer(),
                        bucket.offset() + offset,
                        array.buffer(),
                        at,
                        bytes,
                    );
                }
                offset += bytes;
            }
            batch.submit().map(|_| ())
        };
        for d in 0..self.len() {
            fill(d, true).map_err(|e| on_device(d, &self.device(d).gpu().info().name, e))?;
        }
        let reduced = self.reduce(&buckets.iter().collect::<Vec<_>>(), start)?;
        for d in 0..self.len() {
            fill(d, false).map_err(|e| on_device(d, &self.device(d).gpu().info().name, e))?;
        }
        Ok(self.report(total, start, reduced))
    }

    /// The report of an all-reduce of `len` floats that began at `start`, whose
    /// reduce-scatter (or sums) ended `reduced.0` seconds after it and which ran as
    /// `reduced.1`.
    fn report(
        &self,
        len: usize,
        start: Instant,
        (reduce_scatter_seconds, algorithm): (f64, AllReduceAlgorithm),
    ) -> AllReduceReport {
        AllReduceReport {
            bytes: (len * 4) as u64,
            seconds: start.elapsed().as_secs_f64(),
            devices: self.len(),
            reduce_scatter_seconds,
            algorithm,
        }
    }

    /// Sums `replicas` (checked) as the set's [`AllReduceAlgorithm`] says; returns the
    /// seconds from `start` to the end of the reduce-scatter (or sums) and how it ran.
    fn reduce(
        &self,
        replicas: &[&Typed<f32>],
        start: Instant,
    ) -> Result<(f64, AllReduceAlgorithm)> {
        let wanted = self.transfer.all_reduce;
        if self.len() == 1 || replicas[0].is_empty() {
            return Ok((0.0, AllReduceAlgorithm::Ring));
        }
        let cpu = self.runtimes().iter().any(|rt| rt.gpu().is_cpu());
        let rows_wanted = match wanted {
            AllReduceAlgorithm::Fastest => !cpu,
            AllReduceAlgorithm::HostRows => true,
            AllReduceAlgorithm::Ring => false,
        };
        if rows_wanted {
            match self.take_rows(replicas, cpu) {
                Ok(rows) => {
                    let summed = host_rows::all_reduce(self.runtimes(), replicas, &rows, start);
                    self.put_rows(rows);
                    return Ok((summed?, AllReduceAlgorithm::HostRows));
                }
                Err(e) if wanted == AllReduceAlgorithm::HostRows => return Err(e),
                Err(_) => {}
            }
        }
        Ok((self.ring(replicas, start)?, AllReduceAlgorithm::Ring))
    }

    /// Host rows for summing `replicas` on the GPUs: the set's kept ones where wide
    /// enough, else new ones (rows of `TransferConfig::chunk` bytes, 32 MiB on GPUs and
    /// 1 MiB on CPU adapters, within what the devices can bind and what the array needs).
    /// An error says why they cannot be had. `cpu`: a device is a CPU adapter.
    fn take_rows(&self, replicas: &[&Typed<f32>], cpu: bool) -> Result<host_rows::HostRows> {
        let refused = |why: String| {
            Error::invalid(
                format!("an all-reduce summed on the GPUs from host memory: {why}"),
                "use AllReduceAlgorithm::Ring or Fastest (TransferConfig::all_reduce)",
            )
        };
        for (d, (rt, r)) in self.runtimes().iter().zip(replicas).enumerate() {
            if !host_rows::bindable(rt, r) {
                return Err(refused(format!(
                    "array '{}' on device {d} cannot be bound as storage at offset {}",
                    r.allocation().label(),
                    r.allocation().offset()
                )));
            }
        }
        let gpus: Vec<&crate::Gpu> = self.runtimes().iter().map(|rt| rt.gpu()).collect();
        let chunk = self
            .transfer
            .chunk
            .unwrap_or(if cpu { 1 << 20 } else { 32 << 20 });
        let stride = host_rows::stride_for(&gpus, chunk, replicas[0].len() as u64);
        let kept = self.rows.lock().take();
        match kept {
            Some(rows) if rows.serve(self.len(), stride) => Ok(rows),
            _ => host_rows::HostRows::new(&gpus, stride).ok_or_else(|| {
                refused(format!(
                    "not every device imports host memory (VK_EXT_external_memory_host), \
                     or {} bytes of it could not be had",
                    host_rows::bytes_for(self.len(), stride)
                ))
            }),
        }
    }

    /// Keeps `rows` for the next all-reduce (dropping the ones kept, outside the lock).
    fn put_rows(&self, rows: host_rows::HostRows) {
        let old = self.rows.lock().replace(rows);
        drop(old);
    }

    /// Fails unless `per_device` holds one list of arrays per device, in device order,
    /// each on its device, none in vramkit's all-reduce pools, and every device's list of
    /// the same lengths.
    fn check_replicas(&self, per_device: &[Vec<&Typed<f32>>]) -> Result<()> {
        let n = self.len();
        if per_device.len() != n {
            return Err(Error::misuse(
                crate::Misuse::Shape,
                format!(
                    "{} arrays for an all-reduce over {n} devices",
                    per_device.len()
                ),
                "pass one array (or bucket) per device, in device order",
            ));
        }
        let shape = |list: &Vec<&Typed<f32>>| list.iter().map(|a| a.len()).collect::<Vec<_>>();
        for (d, list) in per_device.iter().enumerate() {
            for a in list {
                let on = self.device_of(a.allocation())?;
                if on != d {
                    return Err(Error::misuse(
 crate::Misuse::Foreign,
                        format!(
                            "array '{}' of device {d}'s part of the all-reduce lives on device {on}",
                            a.allocation().label()
                        ),
                        "pass one array (or bucket) per device, in device order",
                    ));
                }
            }
            if shape(list) != shape(&per_device[0]) {
                return Err(Error::misuse(
                    crate::Misuse::Length,
                    format!(
                        "all-reduce arrays of lengths {:?} on device 0 and {:?} on device {d}",
                        shape(&per_device[0]),
                        shape(list)
                    ),
                    "every device's arrays must have the same lengths",
                ));
            }
        }
        Ok(())
    }

    /// The ring of the module docs over `replicas` (checked); returns the seconds from
    /// `start` to the end of its reduce-scatter.
    fn ring(&self, replicas: &[&Typed<f32>], start: Instant) -> Result<f64> {
        let n = self.len();
        let len = replicas[0].len();
        if n == 1 || len == 0 {
            return Ok(0.0);
        }
        let segments: Vec<Range<usize>> = (0..n).map(|k| k * len / n..(k + 1) * len / n).collect();
        let widest = segments.iter().map(|s| s.len()).max().unwrap_or(0).max(1);
        let scratch = self.per_device(|_, rt| rt.alloc::<f32>(widest, "all-reduce: received"))?;
        // In a pool of their own: the segment is copied between the array and its sum
        // with buffer copies, which refuse source and destination in one buffer.
        let sums =
            self.per_device(|_, rt| alloc_in_own_pool(rt, SUM_POOL, widest, "all-reduce: sum"))?;
        for (replica, sum) in replicas.iter().zip(&sums) {
            same_buffer_refused(replica, sum, SUM_POOL)?;
        }
        let bytes = |r: &Range<usize>| (r.start as u64 * 4, r.len() as u64 * 4);
        // Reduce-scatter: at step s device i sends segment (i - s) mod n to i + 1, which
        // adds it into its own. One copy at a time: each device has one queue, which
        // carries a download and an upload no faster together than one after the other
        // (two H200s: 45-50 GB/s either way), and two threads waiting on one device at
        // once stalled each other (a 32 MiB copy took 11-15 ms instead of 1.7).
        for step in 0..n - 1 {
            let segment = |i: usize| &segments[(i + n - step) % n];
            for i in 0..n {
                let (offset, size) = bytes(segment(i));
                let to = (i + 1) % n;
                self.copy(
                    (replicas[i].allocation(), offset),
                    (scratch[to].allocation(), 0),
                    size,
                )?;
                if size > 0 {
                    self.add_into(to, replicas[to], segment(i), &scratch[to], &sums[to])?;
                }
            }
        }
        let reduce_scatter = start.elapsed().as_secs_f64();
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
        Ok(reduce_scatter)
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
        batch.encoder().copy_buffer_to_buffer(
            r.buffer(),
            r.offset() + offset,
            sum.allocation().buffer(),
            sum.allocation().offset(),
            size,
        );
        batch
            .axpy(1.0, received, sum_part)
            .map_err(|e| on_device(d, &name(), e))?;
        batch.encoder().copy_buffer_to_buffer(
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
                return Err(Error::misuse(
                    crate::Misuse::Foreign,
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

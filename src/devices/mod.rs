//! Several GPUs in one host: a [`DeviceSet`] opens them with a [`Runtime`] each, shows
//! their memory as one ledger, copies between them and splits arrays over them.
//!
//! # How it works
//! - **Opening.** [`DeviceSet::open`] enumerates the adapters of one wgpu instance and
//!   opens every adapter of the best kind present (all discrete GPUs; else the best
//!   adapter), or as many devices as asked, round-robin over those adapters: two devices
//!   on one lavapipe adapter behave as two devices (their own queues, arenas and
//!   allocations; a buffer of one is refused by the other). `VRAMKIT_DEVICES=n` asks for
//!   `n`. Each device gets its own runtime, whose arena carries the device's index
//!   (`ArenaConfig::device_index`: the summary names it and metrics carry
//!   `device="i"`).
//! - **One ledger.** [`DeviceSet::ledger`] reads every arena's allocated and reserved
//!   bytes, its budget (live where the driver reports one:
//!   [`Budget::FractionOfAvailable`](crate::arena::Budget::FractionOfAvailable)) and the
//!   driver's reading, per device and in total. Sharding by free memory reads it; each
//!   device's tiers and planner read the same budget through their arena.
//! - **Copies between devices** ([`DeviceSet::copy`]) go through host memory that both
//!   GPUs copy directly, chunked so that one GPU's download and the other's upload
//!   overlap: one host allocation imported into both devices where Vulkan allows
//!   (`VK_EXT_external_memory_host`), else two staging buffers and a host copy, else (Metal,
//!   DX12, GL) a mapped read-back and a queued write (`link.rs`).
//!   wgpu has no peer-to-peer path (a resource of one device is a validation error on
//!   another), so NVLink and PCIe peer copies are out of reach.
//! - **Sharded arrays** ([`Sharded`], `sharded.rs`): a typed array split along its
//!   leading axis, evenly, by shares or by free memory; scatter, gather, broadcast and
//!   an all-reduce (sum). Where every device is a GPU that imports host memory, each
//!   sums its segment in one kernel that reads the other devices' values out of host
//!   rows they all import (`host_rows.rs`); elsewhere the all-reduce is a ring of these
//!   copies with the additions on the GPUs.
//!
//! # What it promises
//! - Every call checks that the allocations it is given belong to the devices it names;
//!   another device's allocation, or one of no device in the set, is a typed error.
//! - An error on one device names it ([`Error::OnDevice`]); a lost device fails its own
//!   work with [`Error::DeviceLost`] while the other devices continue.
//! - No lock of vramkit's is held while a copy waits for a GPU (each copy takes a link of
//!   its own out of the set's pool and puts it back afterwards).
//! - Native only: the browser has one adapter and no blocking waits.
//!
//! ```no_run
//! use vramkit::devices::{DeviceSet, Split};
//! let set = DeviceSet::open()?;
//! println!("{} devices\n{}", set.len(), set.summary());
//! let x: Vec<f32> = (0..1 << 20).map(|i| i as f32).collect();
//! let sharded = set.scatter(&x, 1024, &Split::Even, "x")?;
//! assert_eq!(set.gather(&sharded)?, x);
//! # Ok::<(), vramkit::Error>(())
//! ```

mod host_rows;
mod link;
mod sharded;

pub(crate) use host_rows::{ALL_REDUCE_STEP, ALL_REDUCE_STEP_VEC4};
pub use link::{TransferConfig, TransferPath};
pub use sharded::{AllReduceAlgorithm, AllReduceReport, Shard, Sharded, Split};

use std::collections::HashMap;

use crate::gpu::GpuOptions;
use crate::sync::rank::{self as lock_rank, Mutex};
use crate::{Allocation, DriverMemory, Error, Gpu, Result, Runtime, RuntimeConfig};
use link::Link;

/// How [`DeviceSet::open_with`] chooses and configures its devices.
#[derive(Clone, Debug, Default)]
pub struct DeviceSetOptions {
    /// Backend and name filters, required features (as for one device).
    pub gpu: GpuOptions,
    /// How many devices: `None` opens every adapter of the best kind present; `Some(n)`
    /// opens `n` devices round-robin over those adapters (more than there are: several
    /// devices on one adapter, as CI does with lavapipe).
    pub count: Option<usize>,
    /// Each device's runtime (its arena's `device_index` and, if empty, name are set per
    /// device).
    pub runtime: RuntimeConfig,
    /// Copies between devices.
    pub transfer: TransferConfig,
}

impl DeviceSetOptions {
    /// [`GpuOptions::from_env`] and `VRAMKIT_DEVICES` (a count).
    pub fn from_env() -> Result<Self> {
        let count = match crate::knobs::Knob::Devices.get() {
            Some(v) if !v.trim().is_empty() => Some(v.trim().parse::<usize>().map_err(|_| {
                Error::invalid(
                    format!("VRAMKIT_DEVICES={v:?} is not a count"),
                    "set it to a number of devices such as 2, or unset it for every GPU",
                )
            })?),
            _ => None,
        };
        Ok(DeviceSetOptions {
            gpu: GpuOptions::from_env()?,
            count,
            ..Default::default()
        })
    }
}

/// Memory of one device of a set, as [`DeviceSet::ledger`] reads it.
#[derive(Clone, Debug)]
pub struct DeviceUsage {
    /// The device's index in the set.
    pub device: usize,
    /// The adapter's name.
    pub name: String,
    /// Bytes in live allocations of its arena.
    pub allocated: u64,
    /// Bytes its arena holds from the device.
    pub reserved: u64,
    /// Its arena's budget in force, if any.
    pub budget: Option<u64>,
    /// The driver's reading (budget and usage of the whole process), where one reports it.
    pub driver: Option<DriverMemory>,
    /// The device's memory size, where the backend reports it.
    pub device_memory: Option<u64>,
}

impl DeviceUsage {
    /// Bytes a new allocation may still take: under the budget (cached ranges count as
    /// free, as the arena reuses them), else what the driver leaves, else the device's
    /// size less what is allocated; `None` where nothing tells.
    pub fn free(&self) -> Option<u64> {
        if let Some(b) = self.budget {
            return Some(b.saturating_sub(self.allocated));
        }
        if let Some(d) = self.driver {
            return Some(d.available() + self.reserved.saturating_sub(self.allocated));
        }
        self.device_memory.map(|m| m.saturating_sub(self.allocated))
    }
}

/// The memory of every device of a set at one moment; see [`DeviceSet::ledger`].
#[derive(Clone, Debug)]
pub struct Ledger {
    /// One entry per device, in index order.
    pub devices: Vec<DeviceUsage>,
}

impl Ledger {
    /// Bytes allocated over all devices.
    pub fn allocated(&self) -> u64 {
        self.devices.iter().map(|d| d.allocated).sum()
    }

    /// Bytes reserved over all devices.
    pub fn reserved(&self) -> u64 {
        self.devices.iter().map(|d| d.reserved).sum()
    }

    /// The sum of the budgets, where every device has one.
    pub fn budget(&self) -> Option<u64> {
        self.devices.iter().map(|d| d.budget).sum()
    }

    /// Free bytes over all devices, where every device tells ([`DeviceUsage::free`]).
    pub fn free(&self) -> Option<u64> {
        self.devices.iter().map(|d| d.free()).sum()
    }
}

/// Several devices of one host with a runtime each; see the module docs.
pub struct DeviceSet {
    devices: Vec<Runtime>,
    transfer: TransferConfig,
    /// Links not in use, by (source, destination); a copy takes one out and puts it back.
    /// Idle links by (source, destination), each with when it was last put back.
    links: Mutex<IdleLinks>,
    /// The host rows of the last all-reduce summed on the GPUs (`host_rows.rs`), kept for
    /// the next: importing host memory into every device takes milliseconds.
    rows: Mutex<Option<host_rows::HostRows>>,
}

impl std::fmt::Debug for DeviceSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceSet")
            .field("devices", &self.devices)
            .finish()
    }
}

impl DeviceSet {
    /// Every GPU of the best kind in this host (or `VRAMKIT_DEVICES` devices), with
    /// default runtimes; see [`DeviceSetOptions::from_env`].
    pub fn open() -> Result<DeviceSet> {
        Self::open_with(&DeviceSetOptions::from_env()?)
    }

    /// The devices `options` asks for; see the module docs.
    pub fn open_with(options: &DeviceSetOptions) -> Result<DeviceSet> {
        crate::gpu::would_block("DeviceSet::open", "one Runtime::headless_async().await")?;
        let backends = options.gpu.backends.unwrap_or(wgpu::Backends::PRIMARY);
        let instance = wgpu::Instance::new(crate::gpu::instance_descriptor(backends));
        let adapters = {
            let _lock = Gpu::lifecycle_lock();
            pollster::block_on(instance.enumerate_adapters(backends))
        };
        let adapters = best_adapters(adapters, &options.gpu)?;
        let count = options.count.unwrap_or(adapters.len());
        if count == 0 {
            return Err(Error::invalid(
                "a device set of 0 devices",
                "ask for at least one device (DeviceSetOptions::count, VRAMKIT_DEVICES)",
            ));
        }
        let mut gpus = Vec::with_capacity(count);
        for i in 0..count {
            let adapter = &adapters[i % adapters.len()];
            // The lock is let go before an error drops the devices opened so far (the
            // last handle of a `Gpu` takes it too).
            let opened = {
                let _lock = Gpu::lifecycle_lock();
                pollster::block_on(Gpu::open_adapter(instance.clone(), adapter, &options.gpu))
            };
            gpus.push(opened.map_err(|e| on_device(i, &adapter.get_info().name, e))?);
        }
        let mut runtimes = Vec::with_capacity(count);
        for (i, gpu) in gpus.iter().enumerate() {
            let mut config = options.runtime.clone();
            config.arena.device_index = Some(i);
            if config.arena.name.is_empty() {
                config.arena.name = format!("device{i}");
            }
            runtimes
                .push(Runtime::new(gpu, config).map_err(|e| on_device(i, &gpu.info().name, e))?);
        }
        Self::from_runtimes(runtimes, options.transfer.clone())
    }

    /// A set of runtimes the application made (on devices it opened or shares with a
    /// renderer). Two runtimes on the same device are refused.
    pub fn from_runtimes(devices: Vec<Runtime>, transfer: TransferConfig) -> Result<DeviceSet> {
        for (i, a) in devices.iter().enumerate() {
            if let Some(j) = devices[..i]
                .iter()
                .position(|b| b.gpu().same_device(a.gpu()))
            {
                return Err(Error::misuse(
                    crate::Misuse::Foreign,
                    format!("runtimes {j} and {i} of a device set share one device"),
                    "give each device of a set one runtime",
                ));
            }
        }
        if devices.is_empty() {
            return Err(Error::invalid(
                "a device set of 0 runtimes",
                "pass at least one runtime",
            ));
        }
        Ok(DeviceSet {
            devices,
            transfer,
            links: Mutex::new(lock_rank::DEVICE_LINKS, HashMap::new()),
            rows: Mutex::new(lock_rank::DEVICE_ROWS, None),
        })
    }

    /// How many devices.
    pub fn len(&self) -> usize {
        self.devices.len()
    }

    /// Never true: a set has at least one device.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// Device `i`'s runtime. Panics past the end, like indexing a slice; see
    /// [`runtimes`](Self::runtimes).
    pub fn device(&self, i: usize) -> &Runtime {
        &self.devices[i]
    }

    /// Every device's runtime, in index order.
    pub fn runtimes(&self) -> &[Runtime] {
        &self.devices
    }

    /// The index of the device `allocation` belongs to, or an error naming what it is.
    pub fn device_of(&self, allocation: &Allocation) -> Result<usize> {
        self.devices
            .iter()
            .position(|rt| rt.gpu().same_device(allocation.gpu()))
            .ok_or_else(|| {
                Error::misuse(
                    crate::Misuse::Foreign,
                    format!(
                        "allocation '{}' belongs to no device of this set (it is on {})",
                        allocation.label(),
                        allocation.gpu().info().name
                    ),
                    "allocate it from one of the set's runtimes (DeviceSet::device)",
                )
            })
    }

    /// Every device's memory now; see the module docs.
    pub fn ledger(&self) -> Ledger {
        Ledger {
            devices: self
                .devices
                .iter()
                .enumerate()
                .map(|(i, rt)| {
                    let arena = rt.arena();
                    let s = arena.stats();
                    DeviceUsage {
                        device: i,
                        name: rt.gpu().info().name.clone(),
                        allocated: s.allocated,
                        reserved: s.reserved,
                        budget: s.budget,
                        driver: arena.driver_reading().or_else(|| rt.gpu().driver_memory()),
                        device_memory: rt.gpu().device_memory(),
                    }
                })
                .collect(),
        }
    }

    /// One table of every device's memory and the total, like
    /// `torch.cuda.memory_summary` per device.
    pub fn summary(&self) -> String {
        use std::fmt::Write;
        let ledger = self.ledger();
        let b = crate::fmt_bytes;
        let opt = |v: Option<u64>| v.map_or("-".to_string(), b);
        let mut out = String::new();
        let _ = writeln!(
            out,
            " {:<7} {:<28} {:>11} {:>11} {:>11} {:>11} {:>11}",
            "device", "adapter", "allocated", "reserved", "budget", "free", "driver"
        );
        for d in &ledger.devices {
            let mut name = d.name.clone();
            name.truncate(28);
            let _ = writeln!(
                out,
                " {:<7} {:<28} {:>11} {:>11} {:>11} {:>11} {:>11}",
                d.device,
                name,
                b(d.allocated),
                b(d.reserved),
                opt(d.budget),
                opt(d.free()),
                opt(d.driver.map(|m| m.budget)),
            );
        }
        let _ = writeln!(
            out,
            " {:<7} {:<28} {:>11} {:>11} {:>11} {:>11}",
            "total",
            format!("{} devices", ledger.devices.len()),
            b(ledger.allocated()),
            b(ledger.reserved()),
            opt(ledger.budget()),
            opt(ledger.free()),
        );
        out
    }

    /// Publishes every device's arena metrics, labelled `device="i"` (cargo feature
    /// `metrics`; see `arena::metrics`).
    #[cfg(feature = "metrics")]
    pub fn publish_metrics(&self) {
        for rt in &self.devices {
            rt.arena().publish_metrics();
        }
    }

    /// Copies `len` bytes of `src` at `src_offset` into `dst` at `dst_offset`, on whichever
    /// devices of the set they live. Between devices it returns once the bytes have landed;
    /// work submitted on `dst`'s device afterwards sees them. On one device it is GPU work
    /// only (one copy command; through a scratch buffer where both ranges lie in one arena
    /// block, which wgpu's copies refuse), queued before whatever is submitted next, with
    /// `memmove` semantics: overlapping ranges of one allocation land as if the source
    /// were read whole first. Offsets and length must be multiples of 4.
    ///
    /// Errors: an allocation of no device in the set, a range past either end, unaligned
    /// offsets or length, a buffer without `COPY_SRC` / `COPY_DST`; a device lost
    /// meanwhile fails with [`Error::OnDevice`] around [`Error::DeviceLost`].
    pub fn copy(
        &self,
        (src, src_offset): (&Allocation, u64),
        (dst, dst_offset): (&Allocation, u64),
        len: u64,
    ) -> Result<()> {
        let (s, d) = (self.device_of(src)?, self.device_of(dst)?);
        check_range("source", src, src_offset, len, wgpu::BufferUsages::COPY_SRC)?;
        check_range(
            "destination",
            dst,
            dst_offset,
            len,
            wgpu::BufferUsages::COPY_DST,
        )?;
        if len == 0 || src.is_virtual() || dst.is_virtual() {
            return Ok(());
        }
        for i in [s, d] {
            let gpu = self.devices[i].gpu();
            gpu.check_alive()
                .map_err(|e| on_device(i, &gpu.info().name, e))?;
        }
        if s == d {
            let gpu = self.devices[s].gpu();
            return copy_on_one_device(gpu, (src, src_offset), (dst, dst_offset), len)
                .map_err(|e| on_device(s, &gpu.info().name, e));
        }
        let link = self.take_link(s, d).map_err(|e| self.blame(&[s, d], e))?;
        let result = link.copy((src, src_offset), (dst, dst_offset), len);
        self.put_link(s, d, link);
        result.map_err(|e| self.blame(&[s, d], e))
    }

    /// Copies all of `src` into `dst` (the same number of elements) across devices, of any
    /// element type and length: an array whose bytes are not a whole number of 4-byte
    /// words (an odd number of `f16`, say) is copied with the covering words, which the
    /// arena allocated with it.
    pub fn copy_typed<T: bytemuck::Pod>(
        &self,
        src: &crate::arena::Typed<T>,
        dst: &crate::arena::Typed<T>,
    ) -> Result<()> {
        if src.len() != dst.len() {
            return Err(Error::misuse(
                crate::Misuse::Length,
                format!("copy of {} elements into {} elements", src.len(), dst.len()),
                "pass allocations of the same length",
            ));
        }
        let bytes = (src.len() * std::mem::size_of::<T>()) as u64;
        // The arena rounds every allocation up to whole words; the covering words are
        // inside both.
        let words = bytes
            .next_multiple_of(4)
            .min(src.allocation().size())
            .min(dst.allocation().size());
        self.copy((src.allocation(), 0), (dst.allocation(), 0), words)
    }

    /// Whether copies from device `s` to `d` share host memory between the GPUs (no host
    /// copy), as opposed to copying between two staging buffers on the host.
    pub fn shares_host_memory(&self, s: usize, d: usize) -> Result<bool> {
        self.check_index(s)?;
        self.check_index(d)?;
        let link = self.take_link(s, d)?;
        let shared = link.shares_host_memory();
        self.put_link(s, d, link);
        Ok(shared)
    }

    /// Replaces how copies between devices are made from now on (chunk size, depth,
    /// shared host memory, overlap); the links made under the old settings are dropped.
    pub fn set_transfer(&mut self, config: TransferConfig) {
        self.transfer = config;
        // Dropped after the locks: each frees host memory through the drivers.
        let links = std::mem::take(&mut *self.links.lock());
        let rows = self.rows.lock().take();
        drop((links, rows));
    }

    /// Waits for all work submitted on every device.
    pub fn synchronize(&self) -> Result<()> {
        for (i, rt) in self.devices.iter().enumerate() {
            rt.gpu()
                .wait_idle()
                .map_err(|e| on_device(i, &rt.gpu().info().name, e))?;
        }
        Ok(())
    }

    fn check_index(&self, i: usize) -> Result<()> {
        if i >= self.devices.len() {
            return Err(Error::invalid(
                format!("device {i} of a set of {}", self.devices.len()),
                "use an index below DeviceSet::len",
            ));
        }
        Ok(())
    }

    /// A link from `s` to `d` for one copy: a free one, or a new one.
    fn take_link(&self, s: usize, d: usize) -> Result<Link> {
        let (found, stale) = {
            let mut links = self.links.lock();
            let found = links.get_mut(&(s, d)).and_then(Vec::pop).map(|(_, l)| l);
            (found, take_stale(&mut links, LINK_IDLE))
        };
        drop(stale);
        match found {
            Some(link) => Ok(link),
            None => Link::new(self.devices[s].gpu(), self.devices[d].gpu(), &self.transfer),
        }
    }

    fn put_link(&self, s: usize, d: usize, link: Link) {
        let stale = {
            let mut links = self.links.lock();
            links
                .entry((s, d))
                .or_default()
                .push((web_time::Instant::now(), link));
            take_stale(&mut links, LINK_IDLE)
        };
        drop(stale);
    }

    /// Gives back the host memory of every idle link between devices (each holds `depth`
    /// chunks of pinned host memory, 256 MiB on GPUs by default); the next copy between
    /// two devices makes its link again. Links idle for more than 5 s go on their own at
    /// the set's next copy. The host rows of all-reduces summed on the GPUs go too.
    /// Returns how many links (and row sets) were dropped.
    pub fn trim(&self) -> usize {
        let idle = take_stale(&mut self.links.lock(), std::time::Duration::ZERO);
        let rows = self.rows.lock().take();
        idle.len() + usize::from(rows.is_some())
    }

    /// `e`, wrapped with the device it concerns: the first of `devices` that is lost, else
    /// the error as it is (it names its allocation or argument already).
    fn blame(&self, devices: &[usize], e: Error) -> Error {
        match devices
            .iter()
            .find(|&&i| self.devices[i].gpu().lost().is_some())
        {
            Some(&i) => on_device(i, &self.devices[i].gpu().info().name, e),
            None => e,
        }
    }
}

/// Idle links by (source, destination), each with when it was last put back.
type IdleLinks = HashMap<(usize, usize), Vec<(web_time::Instant, Link)>>;

/// How long an idle link keeps its host memory before a copy of the set drops it.
const LINK_IDLE: std::time::Duration = std::time::Duration::from_secs(5);

/// The links idle for longer than `idle`, taken out of `links` (dropped by the caller,
/// after the lock: dropping one frees host memory through the driver).
fn take_stale(links: &mut IdleLinks, idle: std::time::Duration) -> Vec<Link> {
    let mut stale = Vec::new();
    for pool in links.values_mut() {
        let (keep, old): (Vec<_>, Vec<_>) = std::mem::take(pool)
            .into_iter()
            .partition(|(at, _)| at.elapsed() < idle && !idle.is_zero());
        *pool = keep;
        stale.extend(old.into_iter().map(|(_, l)| l));
    }
    stale
}

/// `e` as an error of device `i`.
pub(crate) fn on_device(i: usize, adapter: &str, e: Error) -> Error {
    match e {
        already @ Error::OnDevice { .. } => already,
        e => Error::OnDevice {
            device: i,
            adapter: adapter.to_string(),
            source: Box::new(e),
        },
    }
}

/// The largest scratch buffer a same-block copy goes through at once.
const SCRATCH_CHUNK: u64 = 64 << 20;

/// A copy between two ranges on one device (`DeviceSet::copy`'s docs): one copy command
/// between two buffers; within one buffer, chunks through a scratch buffer in the order
/// that reads every source byte before it is overwritten (back to front when the
/// destination starts later), all in one submission.
fn copy_on_one_device(
    gpu: &Gpu,
    (src, src_offset): (&Allocation, u64),
    (dst, dst_offset): (&Allocation, u64),
    len: u64,
) -> Result<()> {
    let (src_at, dst_at) = (src.offset() + src_offset, dst.offset() + dst_offset);
    if src.buffer() != dst.buffer() {
        gpu.submit_copy(
            "copying between allocations of one device",
            (src.buffer(), src_at),
            (dst.buffer(), dst_at),
            len,
        )?;
        return Ok(());
    }
    if src_at == dst_at {
        return Ok(());
    }
    let chunk = len.min(SCRATCH_CHUNK).min(gpu.limits().max_buffer_size);
    let during = "copying within an arena block through a scratch buffer";
    gpu.scoped(during, || {
        let scratch = gpu.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("vramkit same-block copy scratch"),
            size: chunk,
            usage: wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = gpu
            .device()
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some(during),
            });
        let mut starts: Vec<u64> = (0..len.div_ceil(chunk)).map(|i| i * chunk).collect();
        if dst_at > src_at {
            starts.reverse();
        }
        for start in starts {
            let n = chunk.min(len - start);
            encoder.copy_buffer_to_buffer(src.buffer(), src_at + start, &scratch, 0, n);
            encoder.copy_buffer_to_buffer(&scratch, 0, dst.buffer(), dst_at + start, n);
        }
        gpu.submit([encoder.finish()]);
    })
}

/// Fails unless `len` bytes at `offset` lie in `a`, aligned, with `usage`.
fn check_range(
    what: &str,
    a: &Allocation,
    offset: u64,
    len: u64,
    usage: wgpu::BufferUsages,
) -> Result<()> {
    if offset.checked_add(len).is_none_or(|end| end > a.size()) {
        return Err(Error::misuse(
            crate::Misuse::Length,
            format!(
                "the copy's {what} range {offset}..{} lies outside '{}' ({} bytes)",
                offset.saturating_add(len),
                a.label(),
                a.size()
            ),
            "pass a range inside the allocation",
        ));
    }
    if !offset.is_multiple_of(4) || !len.is_multiple_of(4) {
        return Err(Error::misuse(
            crate::Misuse::Alignment,
            format!("a copy of {len} bytes at {what} offset {offset}"),
            "offsets and lengths of copies between devices must be multiples of 4",
        ));
    }
    if !a.buffer().usage().contains(usage) {
        return Err(Error::misuse(
            crate::Misuse::Usage,
            format!("the copy's {what} '{}' lacks {usage:?}", a.label()),
            "allocate it from a pool whose usage includes COPY_SRC and COPY_DST (the default)",
        ));
    }
    Ok(())
}

/// The adapters of the best kind present that pass `options`' name filter (discrete GPUs
/// where any, else integrated, ...), in enumeration order.
fn best_adapters(adapters: Vec<wgpu::Adapter>, options: &GpuOptions) -> Result<Vec<wgpu::Adapter>> {
    let seen = crate::gpu::seen(&adapters);
    let wanted = options.adapter_name.as_ref().map(|n| n.to_lowercase());
    let matching: Vec<wgpu::Adapter> = adapters
        .into_iter()
        .filter(|a| {
            wanted
                .as_ref()
                .is_none_or(|n| a.get_info().name.to_lowercase().contains(n))
        })
        .collect();
    let Some(best) = matching
        .iter()
        .map(|a| crate::gpu::rank(&a.get_info()))
        .min()
    else {
        return Err(Error::NoAdapter {
            selection: options.describe(),
            seen,
            hint: crate::gpu::INSTALL_HINT.to_string(),
        });
    };
    Ok(matching
        .into_iter()
        .filter(|a| crate::gpu::rank(&a.get_info()) == best)
        .collect())
}

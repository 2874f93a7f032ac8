//! Worker threads that prepare a growth off the thread that calls
//! [`MipStreamer::update`](super::MipStreamer::update): they read the levels it brings,
//! straight into level staging (`staging.rs`, waiting for room when it is full) or into
//! ordinary memory where the device has none or a load is larger than all of it, make its
//! new texture (allocating device memory takes a driver hundreds of microseconds for a
//! large texture) and record and submit its copies (the levels the old texture holds, and
//! the staged ones): wgpu encodes and tracks each copy when a command buffer is finished,
//! 5-8 µs a copy on an H200's host, a growth copies up to a dozen levels, and a submit of a
//! large growth's copies took the H200's driver 1.1-2.2 ms (the frame that submitted them
//! was the second slowest of every run). The frame thread only decides which growths land.
//! They prepare the shrinks an update leaves to them the same way, with no levels to read.
//! A reaper thread drops the textures growths and shrinks replaced, once the GPU is done
//! with them, for the same reason; it yields to the frame: while `update` runs it waits
//! before it drops a texture (`gate.rs`).
//!
//! Without threads (in the browser, where a page has one, or with `loader_threads: 0`) the
//! frame's own thread does both when it collects results: same order, same results, the
//! time counted in the frame's.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;
use web_time::Instant;

use parking_lot::Condvar;

use super::gate::{FrameGate, InUpdate};
use super::source::{copy_extent, level_bytes, MipSource};
use super::staging::{LevelStaging, StagedRange};
use super::TextureSpec;
use crate::sync::rank::{self as lock_rank, Mutex};
use crate::{Error, Gpu, Result};

/// Levels `levels` of one texture's chain, to be read for slot `slot`; `serial` tells a
/// result from the one of a load the streamer has since given up.
pub(crate) struct Job {
    pub slot: usize,
    pub serial: u64,
    pub source: Arc<dyn MipSource>,
    pub levels: Range<u32>,
    /// The texture it lands in, which holds `[levels.start, texture.levels)`.
    pub texture: TextureSpec,
    /// The texture it replaces, which holds `[held_from, texture.levels)`: the slot's
    /// texture when the swap was planned, which stays until the swap lands or is dropped
    /// (a swap pending on a slot holds back every other swap of it).
    pub held: wgpu::Texture,
    /// The chain level `held`'s level 0 is: `levels.end` for a growth; for a shrink
    /// (`levels` empty, at the level it shrinks to) a finer one.
    pub held_from: u32,
}

/// A prepared growth: its texture, filled by copies already submitted, and the levels
/// still to upload (heap loads).
pub(crate) struct Landing {
    pub texture: wgpu::Texture,
    pub levels: Levels,
}

/// Where one level lies in a load's staging range: its offset and row pitch.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Placed {
    pub offset: u64,
    pub pitch: u32,
    pub rows: u32,
}

/// A load's bytes.
pub(crate) enum Levels {
    /// In level staging, ready for the GPU to copy: one [`Placed`] per level.
    Staged(StagedRange, Vec<Placed>),
    /// In ordinary memory, tight rows, one `Vec` per level.
    Heap(Vec<Vec<u8>>),
}

impl Levels {
    /// Texel bytes of the load (tight, as the budget and the cap count them).
    pub fn bytes(&self, job: &Job) -> u64 {
        let (format, size) = (job.source.format(), job.source.size());
        job.levels
            .clone()
            .map(|l| level_bytes(format, size, l).unwrap_or(0))
            .sum()
    }
}

/// A finished load: its job and its landing, or why not.
pub(crate) type Loaded = (Job, Result<Landing>);

struct Shared {
    queue: Mutex<VecDeque<Job>>,
    wake: Condvar,
    stop: AtomicBool,
}

/// The worker pool; see the module docs.
pub(crate) struct Loader {
    shared: Arc<Shared>,
    results: mpsc::Receiver<Loaded>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// Loads queued or being read.
    outstanding: usize,
    staging: Option<Arc<LevelStaging>>,
    gpu: Gpu,
    reaper: Reaper,
    /// Whether the frame's thread is inside `update`, which the reaper yields to
    /// (`gate.rs`).
    gate: FrameGate,
}

/// Where replaced textures go to be dropped: a thread of their own, or (no threads) at
/// once on the calling thread.
#[derive(Clone)]
pub(crate) struct Reaper(Option<mpsc::Sender<Vec<wgpu::Texture>>>);

impl Reaper {
    /// Drops `textures` on the reaper's thread (or here, where there is none).
    pub fn retire(&self, textures: Vec<wgpu::Texture>) {
        if let Some(tx) = &self.0 {
            // A closed channel means the streamer is gone: dropped here instead.
            let _ = tx.send(textures);
        }
    }
}

impl Loader {
    /// `threads` workers (0: the frame's thread reads), writing into `staging` where given,
    /// making textures on `gpu`.
    pub fn new(gpu: &Gpu, threads: usize, staging: Option<Arc<LevelStaging>>) -> Result<Loader> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(lock_rank::VT_LOAD_QUEUE, VecDeque::new()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let (tx, results) = mpsc::channel();
        let gate = FrameGate::default();
        let mut handles = Vec::new();
        for i in 0..threads {
            let (shared, tx, staging) = (shared.clone(), tx.clone(), staging.clone());
            let gpu = gpu.clone();
            let handle = std::thread::Builder::new()
                .name(format!("vramkit-mip-load-{i}"))
                .spawn(move || loop {
                    let job = {
                        let mut q = shared.queue.lock();
                        loop {
                            if shared.stop.load(Ordering::Acquire) {
                                return;
                            }
                            if let Some(j) = q.pop_front() {
                                break j;
                            }
                            shared.wake.wait(&mut q.guard);
                        }
                    };
                    let levels = match read(&job, staging.as_ref(), &shared.stop) {
                        Some(levels) => levels.and_then(|l| land(&gpu, &job, l)),
                        None => return, // stopping
                    };
                    if tx.send((job, levels)).is_err() {
                        return;
                    }
                })
                .map_err(|e| Error::Io {
                    during: "starting a mip loader thread".into(),
                    source: e,
                })?;
            handles.push(handle);
        }
        let reaper = if threads == 0 {
            Reaper(None)
        } else {
            let (tx, rx) = mpsc::channel::<Vec<wgpu::Texture>>();
            let gate = gate.clone();
            // Not joined: it ends when the last sender goes, which may be a callback of a
            // submission still in flight when the streamer is dropped.
            std::thread::Builder::new()
                .name("vramkit-mip-reaper".into())
                .spawn(move || {
                    for textures in rx {
                        for texture in textures {
                            gate.wait_for_frame();
                            drop(texture);
                        }
                    }
                })
                .map_err(|e| Error::Io {
                    during: "starting the mip reaper thread".into(),
                    source: e,
                })?;
            Reaper(Some(tx))
        };
        Ok(Loader {
            shared,
            results,
            threads: handles,
            outstanding: 0,
            staging,
            gpu: gpu.clone(),
            reaper,
            gate,
        })
    }

    /// Marks the frame's thread inside `update` until the guard drops: the reaper's
    /// drops wait for it (`gate.rs`).
    pub fn enter_frame(&self) -> InUpdate {
        self.gate.enter()
    }

    /// Where replaced textures go.
    pub fn reaper(&self) -> Reaper {
        self.reaper.clone()
    }

    /// Queues a load behind the others.
    pub fn push(&mut self, job: Job) {
        self.shared.queue.lock().push_back(job);
        self.outstanding += 1;
        self.shared.wake.notify_one();
    }

    /// Takes back the queued loads of `slot` no worker has started (a worker's load comes
    /// back and is told apart by its serial).
    pub fn cancel(&mut self, slot: usize) {
        let mut q = self.shared.queue.lock();
        let before = q.len();
        q.retain(|j| j.slot != slot);
        self.outstanding -= before - q.len();
    }

    /// Loads finished since the last call, without waiting; without threads, every queued
    /// load, read now.
    pub fn finished(&mut self) -> Vec<Loaded> {
        let done: Vec<Loaded> = if self.threads.is_empty() {
            std::iter::from_fn(|| self.read_next_inline()).collect()
        } else {
            self.results.try_iter().collect()
        };
        self.outstanding -= done.len();
        done
    }

    /// Waits until every queued load has finished, `timeout` has passed, or (with
    /// `until_starved`) a worker waits for staging room, which only the frame thread
    /// frees; returns the loads finished.
    pub fn wait_all(&mut self, timeout: Duration, until_starved: bool) -> Vec<Loaded> {
        let mut done = self.finished();
        if self.threads.is_empty() {
            return done; // read inline: nothing is left to wait for
        }
        let deadline = Instant::now() + timeout;
        while self.outstanding > 0 && !(until_starved && self.starved()) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if let Ok(l) = self
                .results
                .recv_timeout(left.min(Duration::from_millis(5)))
            {
                self.outstanding -= 1;
                done.push(l);
            }
        }
        done
    }

    /// Whether a worker waits for staging room now.
    pub fn starved(&self) -> bool {
        self.staging.as_ref().is_some_and(|s| s.starved())
    }

    /// Whether loads are read on the frame's thread (no workers).
    pub fn inline(&self) -> bool {
        self.threads.is_empty()
    }

    /// Reads the first queued load on this thread (no threads: module docs).
    fn read_next_inline(&self) -> Option<Loaded> {
        let job = self.shared.queue.lock().pop_front()?;
        let landing = heap(&job).and_then(|l| land(&self.gpu, &job, l));
        Some((job, landing))
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        // Set under the queue's lock: a worker checks `stop` and sleeps under that lock,
        // so it either sees the flag or is asleep when the notification comes.
        {
            let _q = self.shared.queue.lock();
            self.shared.stop.store(true, Ordering::Release);
        }
        self.shared.wake.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Where each level of `job` goes in a staging range, and the range's length: each level
/// at a 256-byte boundary, rows padded to the 256-byte copy pitch.
fn layout(job: &Job) -> (Vec<Placed>, u64) {
    let format = job.source.format();
    let size = job.source.size();
    let (bw, bh) = format.block_dimensions();
    let block = u64::from(format.block_copy_size(None).unwrap_or(4));
    let mut at = 0u64;
    let placed = job
        .levels
        .clone()
        .map(|l| {
            let e = copy_extent(format, size, l);
            let row = u64::from(e.width / bw) * block;
            let pitch = row.next_multiple_of(u64::from(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT));
            let rows = e.height / bh;
            let p = Placed {
                offset: at,
                pitch: pitch as u32,
                rows,
            };
            at = (at + pitch * u64::from(rows)).next_multiple_of(256);
            p
        })
        .collect();
    (placed, at)
}

/// Reads `job` into staging where there is room for it, else into ordinary memory; `None`
/// when stopping while waiting for room.
fn read(
    job: &Job,
    staging: Option<&Arc<LevelStaging>>,
    stop: &AtomicBool,
) -> Option<Result<Levels>> {
    if job.levels.is_empty() {
        // A shrink: nothing to read.
        return Some(Ok(Levels::Heap(Vec::new())));
    }
    let (placed, len) = layout(job);
    let Some(pool) = staging.filter(|s| len <= s.capacity()) else {
        return Some(heap(job));
    };
    let mut range = pool.take_waiting(len, stop)?;
    let filled = (|| {
        let bytes = range.bytes_mut();
        for (l, p) in job.levels.clone().zip(&placed) {
            let texels = read_level(job.source.as_ref(), l)?;
            let rows = p.rows as usize;
            let row = texels.len() / rows.max(1);
            let (start, pitch) = (p.offset as usize, p.pitch as usize);
            if row == pitch {
                bytes[start..start + texels.len()].copy_from_slice(&texels);
            } else {
                for (r, src) in texels.chunks_exact(row).enumerate() {
                    let at = start + r * pitch;
                    bytes[at..at + row].copy_from_slice(src);
                }
            }
        }
        Ok(())
    })();
    Some(filled.map(|()| Levels::Staged(range, placed)))
}

/// Makes `job`'s texture for `levels` and records its copies.
fn land(gpu: &Gpu, job: &Job, levels: Levels) -> Result<Landing> {
    let target = job.levels.start;
    let texture = job.texture.create(gpu, target)?;
    let (format, size) = (job.source.format(), job.source.size());
    let mut encoder = gpu
        .device()
        .create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("vramkit mip growth"),
        });
    super::copy_held_levels(
        &mut encoder,
        (&job.held, job.held_from),
        (&texture, target),
        job.levels.end.max(job.held_from)..job.texture.levels,
        format,
        size,
    );
    if let Levels::Staged(range, placed) = &levels {
        super::copy_staged_levels(
            &mut encoder,
            range,
            placed,
            (&texture, target),
            job.levels.clone(),
            format,
            size,
        );
    }
    let mut levels = levels;
    gpu.scoped("submitting a mip growth's copies", || {
        gpu.submit([encoder.finish()]);
    })?;
    if let Levels::Staged(range, _) = &mut levels {
        range.copied_by(gpu, gpu.work_epoch());
    }
    // Submitted here, so the frame's submit carries none of it; the copies are on the
    // queue before the frame's thread can land the growth, so before any of the app's
    // work that samples the new texture.
    Ok(Landing { texture, levels })
}

/// Reads `job`'s levels into ordinary memory.
fn heap(job: &Job) -> Result<Levels> {
    job.levels
        .clone()
        .map(|l| read_level(job.source.as_ref(), l))
        .collect::<Result<Vec<_>>>()
        .map(Levels::Heap)
}

/// Level `level` of `source`, checked to be as long as its size and format make it.
fn read_level(source: &dyn MipSource, level: u32) -> Result<Vec<u8>> {
    let texels = source.read_level(level)?;
    let want = level_bytes(source.format(), source.size(), level)?;
    if texels.len() as u64 != want {
        return Err(Error::misuse(
            crate::Misuse::Length,
            format!(
                "a mip source gave {} bytes for level {level}, not {want}",
                texels.len()
            ),
            "return tight rows of the level's texels (MipSource::read_level)",
        ));
    }
    Ok(texels)
}

//! Mip streaming for ordinary textures: each texture holds only the mip levels the view
//! needs, under a byte budget, with the rest read from its [`MipSource`] when wanted.
//!
//! wgpu has no partial residency, so a texture changes its resident levels by being
//! replaced: a new texture with levels `[r, n)` of the full chain (its level 0 is the
//! chain's level `r`), filled by a GPU copy of the levels both hold and uploads of the new
//! ones, swapped in at [`MipStreamer::update`]. Sampling needs no change: with normalised
//! coordinates the hardware picks the same full-chain level from the smaller texture. A
//! texture's [`generation`](StreamedTexture::generation) changes with each swap, so a host
//! rebuilds its bind group only then; the old texture is dropped after the copy is
//! submitted and wgpu frees it when the GPU is done.
//!
//! # A frame
//! The host says, per texture, the finest level its view needs ([`MipStreamer::set_wanted`],
//! from a screen-size estimate: [`wanted_level`], or from what the GPU sampled:
//! [`MipFeedback`]) and how much it matters; once a frame
//! [`MipStreamer::update`] plans (`plan.rs`: everybody coarse first, then sharper by
//! benefit per byte while the budget holds), shrinks what the budget or the view no longer
//! allows, and grows by importance within the per-frame upload cap.
//!
//! # Promises
//! - **Within the budget**: at the end of every `update`, the bytes of the textures the
//!   streamer holds are within its budget; [`set_budget`](MipStreamer::set_budget) (a
//!   neighbour took memory) shrinks textures at the next update instead of allocating into
//!   an out-of-memory error. During a swap the old texture lives until the GPU has copied
//!   from it: at most the textures growing that frame, for one frame.
//! - **Within the cap**: each `update` uploads at most `upload_cap` bytes; registration
//!   refuses a texture with a level larger than the cap.
//! - **Exact**: every resident level holds its source's bytes.
//! - **Ledgered**: the textures are vramkit's line "mip-streamed textures" in the device
//!   ledger.
//!
//! Sources: [`MemoryMips`] (levels in memory), [`Ktx2Mips`] (KTX2 files),
//! or the app's own [`MipSource`].
//!
//! # Off the frame thread
//! A texture that grows is loaded by loader threads (`loader.rs`,
//! [`MipConfig::loader_threads`]): they read its new levels from the source and write them
//! into host staging the GPU copies from (`staging.rs`), make its texture and record and
//! submit its copies, so `update` only plans, records and submits shrinks, and swaps
//! textures. It makes the shrinks the budget needs at once (after a cut) and at most three
//! more a frame; the loaders prepare the rest as they do growths (no levels to read), to
//! land a frame or two later, and a growth that needs the room such a shrink gives back
//! waits for it. A loop that calls `update` back to back (`gate.rs`) makes all its shrinks
//! at once. A growth planned in one `update` lands in a later one (the first after its
//! levels are read and its copies submitted); the plan counts it as held meanwhile, and a
//! plan that changes its mind (the camera moved on, the budget shrank) drops it. At most
//! [`MipConfig::growths_per_frame`] growths land in one `update` (each is a texture the app
//! rebinds), and, where [`MipConfig::update_time_target`] is set, fewer where the update
//! would otherwise pass it: the streamer learns what a copy costs the submit on this device
//! and stops landing when the time spent plus the predicted submit of the frame's shrinks
//! would cross the target (one growth lands per update whatever it costs, so every growth
//! lands eventually). The rest land in the next frames. Where there is no host staging (not
//! Vulkan) the loaded levels go through the uploader on the frame thread; in the browser,
//! which has one thread, the frame's thread reads them.

mod feedback;
mod gate;
mod ktx2;
mod loader;
mod pacing;
mod plan;
mod shrink;
mod source;
mod staging;

pub use self::ktx2::Ktx2Mips;
pub use feedback::MipFeedback;
pub use source::{MemoryMips, MipSource};

use std::sync::Arc;

use crate::error::{Limit, OutOfMemory};
use crate::gpu::accounts::{Account, Charge, MemoryKind, Part};
use crate::stream::Uploader;
use crate::{Error, Gpu, Misuse, Result};
use source::{copy_extent, full_chain, level_bytes, level_size};

/// Settings of a [`MipStreamer`].
#[derive(Clone, Debug)]
pub struct MipConfig {
    /// Bytes the streamed textures may hold together.
    pub budget: u64,
    /// Bytes uploaded per `update` at most.
    pub upload_cap: u64,
    /// Usages the host needs besides `TEXTURE_BINDING`, `COPY_DST` and `COPY_SRC` (which
    /// the streamer always sets).
    pub extra_usage: wgpu::TextureUsages,
    /// Threads that read growing textures' levels (0: the thread that calls `update`, as
    /// in the browser, where this is ignored).
    pub loader_threads: usize,
    /// Host staging the loaders write levels into (0: two upload caps). A load larger than
    /// all of it comes back in ordinary memory.
    pub staging_bytes: u64,
    /// Growths landed per `update` at most (the rest land in later frames): each is a new
    /// texture, whose bind groups the app rebuilds. Shrinks the budget needs are never
    /// held back.
    pub growths_per_frame: usize,
    /// CPU time an `update` aims to stay within (`None`: only `growths_per_frame` limits
    /// it, as for a loading screen or a test that counts frames). Growths stop landing once
    /// the time spent plus the predicted cost of submitting the frame's shrinks would pass
    /// it; at least one lands per update. Shrinks the budget needs are never held back, so
    /// a budget cut's frame may take longer.
    pub update_time_target: Option<std::time::Duration>,
}

impl Default for MipConfig {
    fn default() -> Self {
        MipConfig {
            budget: 256 << 20,
            upload_cap: 16 << 20,
            extra_usage: wgpu::TextureUsages::empty(),
            loader_threads: 2,
            staging_bytes: 0,
            growths_per_frame: 12,
            update_time_target: None,
        }
    }
}

/// A texture's handle in its streamer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MipId(u32);

impl MipId {
    /// The id's index: what the host's shader passes to `mip_feedback_write`
    /// ([`MipFeedback`]). Indices of removed textures are reused.
    pub fn index(self) -> u32 {
        self.0
    }
}

/// What a streamed texture holds now.
#[derive(Clone, Debug)]
pub struct StreamedTexture {
    /// The texture: the full chain's levels `[resident, level_count)`.
    pub texture: wgpu::Texture,
    /// Changes each time `texture` is replaced.
    pub generation: u64,
    /// The finest level held.
    pub resident: u32,
}

/// Per-texture figures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MipTextureStats {
    /// The label given at registration.
    pub label: String,
    /// The finest level held, wanted, and the levels of the full chain.
    pub resident: u32,
    /// See above.
    pub wanted: u32,
    /// See above.
    pub levels: u32,
    /// Bytes held, and of the full chain.
    pub resident_bytes: u64,
    /// See above.
    pub full_bytes: u64,
}

/// The streamer's figures.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MipStats {
    /// Textures registered.
    pub textures: usize,
    /// Bytes held now, and the budget.
    pub resident_bytes: u64,
    /// See above.
    pub budget: u64,
    /// The most held at the end of any update.
    pub peak_resident_bytes: u64,
    /// Bytes of every full chain.
    pub full_bytes: u64,
    /// Bytes uploaded by the last update, and in all.
    pub uploaded_last: u64,
    /// See above.
    pub uploaded_total: u64,
    /// Updates whose uploads went past the cap (0 is the promise).
    pub uploads_over_cap: u64,
    /// Textures replaced (grown or shrunk).
    pub swaps: u64,
    /// Textures the device refused to create (the old one kept).
    pub ooms: u64,
    /// Updates run.
    pub frames: u64,
    /// Textures holding fewer levels than they want (the budget or the cap held them).
    pub short: usize,
    /// Swaps the loaders are preparing (planned, not landed): growths, and shrinks the
    /// budget did not need at once.
    pub loading: usize,
    /// Swaps dropped before they landed (the plan changed its mind).
    pub loads_dropped: u64,
    /// What the last update did and where its time went.
    pub last_update: LastUpdate,
}

/// What one [`MipStreamer::update`] did and where its time went on the calling thread:
/// for an app that keeps its frame time, and to tell a slow frame's cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LastUpdate {
    /// Textures shrunk, and grown.
    pub shrinks: usize,
    /// See above.
    pub growths: usize,
    /// The whole update.
    pub total: std::time::Duration,
    /// Polling the device and collecting the loaders' finished loads.
    pub poll: std::time::Duration,
    /// Planning every texture's target level, and queuing the new loads.
    pub plan: std::time::Duration,
    /// Making the shrinks' textures and recording their copies.
    pub shrink: std::time::Duration,
    /// Choosing the growths that land.
    pub land: std::time::Duration,
    /// Submitting the frame's command buffers.
    pub submit: std::time::Duration,
    /// Uploading loads that came back without staging (no host staging on this
    /// backend, or a load larger than all of it), through the uploader.
    pub upload: std::time::Duration,
}

struct Slot {
    source: Arc<dyn MipSource>,
    label: String,
    level_bytes: Vec<u64>,
    coarsest: u32,
    wanted: u32,
    importance: f32,
    current: StreamedTexture,
    charge: Charge,
    /// A growth being loaded: its target level, its serial, and its levels once read.
    pending: Option<Pending>,
}

impl Slot {
    /// Bytes of the chain's levels `levels`.
    fn bytes(&self, levels: std::ops::Range<u32>) -> u64 {
        self.level_bytes[levels.start as usize..levels.end as usize]
            .iter()
            .sum()
    }

    /// What its textures are made of, with `usage` besides the streamer's own.
    fn spec(&self, usage: wgpu::TextureUsages) -> TextureSpec {
        TextureSpec {
            label: self.label.clone(),
            format: self.source.format(),
            size: self.source.size(),
            levels: self.level_bytes.len() as u32,
            usage,
        }
    }
}

/// A swap planned and not landed: a growth, or a shrink the loaders prepare (module
/// docs, "Off the frame thread").
struct Pending {
    target: u32,
    /// The resident level it grows from.
    from: u32,
    serial: u64,
    loaded: Option<(loader::Job, loader::Landing)>,
}

/// Streams the mip levels of many textures under one budget (module docs).
///
/// ```no_run
/// use std::sync::Arc;
/// use vramkit::mips::{MemoryMips, MipConfig, MipStreamer};
/// let gpu = vramkit::Gpu::headless()?;
/// let mut streamer = MipStreamer::new(&gpu, MipConfig { budget: 64 << 20, ..Default::default() })?;
/// let levels = (0..9).map(|l| vec![200u8; (256usize >> l).pow(2) * 4]).collect();
/// let source = MemoryMips::new(wgpu::TextureFormat::Rgba8Unorm, (256, 256), levels)?;
/// let id = streamer.add(Arc::new(source), "rock")?;
/// // Each frame: how sharp the view needs it (256 texels over ~64 pixels: level 2).
/// streamer.set_wanted(id, vramkit::mips::wanted_level((256, 256), 64.0), 64.0 * 64.0)?;
/// streamer.update()?;
/// let shown = streamer.texture(id)?; // bind shown.texture; rebuild when shown.generation changes
/// # Ok::<(), vramkit::Error>(())
/// ```
pub struct MipStreamer {
    gpu: Gpu,
    config: MipConfig,
    uploader: Uploader,
    account: Arc<Account>,
    slots: Vec<Option<Slot>>,
    stats: MipStats,
    next_generation: u64,
    loader: loader::Loader,
    next_serial: u64,
    /// What a frame's submit costs for its copies, learned from the frames before.
    submit_cost: pacing::SubmitCost,
}

/// The finest level worth holding for a texture of `size` drawn `screen_pixels` across
/// at most: where one texel covers about one pixel.
pub fn wanted_level(size: (u32, u32), screen_pixels: f32) -> u32 {
    let texels = size.0.max(size.1) as f32;
    let levels = full_chain(size);
    if screen_pixels <= 0.0 {
        return levels - 1;
    }
    ((texels / screen_pixels).log2().floor().max(0.0) as u32).min(levels - 1)
}

impl MipStreamer {
    /// A streamer on `gpu` with its own upload ring.
    pub fn new(gpu: &Gpu, config: MipConfig) -> Result<MipStreamer> {
        if config.upload_cap == 0 {
            return Err(Error::misuse(
                Misuse::Length,
                "a mip streamer with an upload cap of 0 bytes",
                "give a cap of at least the largest level you will stream",
            ));
        }
        let threads = if cfg!(web) { 0 } else { config.loader_threads };
        let staging = match threads {
            0 => None,
            _ => staging::LevelStaging::new(
                gpu,
                match config.staging_bytes {
                    0 => config.upload_cap.saturating_mul(2),
                    b => b,
                },
            ),
        };
        Ok(MipStreamer {
            loader: loader::Loader::new(gpu, threads, staging)?,
            next_serial: 1,
            submit_cost: pacing::SubmitCost::new(),
            gpu: gpu.clone(),
            uploader: Uploader::new(gpu, Default::default()),
            account: gpu.accounts().account(
                Part::Vramkit,
                MemoryKind::Device,
                "mip-streamed textures",
            ),
            config,
            slots: Vec::new(),
            stats: MipStats::default(),
            next_generation: 1,
        })
    }

    /// Registers a texture: its coarsest allowed levels are made resident now (they are
    /// counted against the budget, like every level). An error, with nothing registered,
    /// for an empty or malformed source, a level larger than the upload cap, or coarse
    /// levels that do not fit in what is left of the budget.
    pub fn add(&mut self, source: Arc<dyn MipSource>, label: &str) -> Result<MipId> {
        let format = source.format();
        let size = source.size();
        let levels = source.level_count();
        let full = full_chain(size);
        if levels == 0 || levels > full || size.0 == 0 || size.1 == 0 {
            return Err(Error::misuse(
                Misuse::Shape,
                format!(
                    "'{label}': a {}x{} source with {levels} levels",
                    size.0, size.1
                ),
                "give at least one level and at most the full chain",
            ));
        }
        let level_bytes = (0..levels)
            .map(|l| level_bytes(format, size, l))
            .collect::<Result<Vec<u64>>>()?;
        if let Some((l, b)) = level_bytes
            .iter()
            .enumerate()
            .find(|(_, &b)| b > self.config.upload_cap)
        {
            return Err(Error::misuse(
                Misuse::Length,
                format!(
                    "'{label}': level {l} is {b} bytes, more than the upload cap of {}",
                    self.config.upload_cap
                ),
                "raise MipConfig::upload_cap to the largest level you stream",
            ));
        }
        // Block-compressed textures must start on a block-aligned size.
        let (bw, bh) = format.block_dimensions();
        let coarsest = (0..levels)
            .rev()
            .find(|&l| {
                let (w, h) = level_size(size, l);
                w % bw == 0 && h % bh == 0
            })
            .ok_or_else(|| {
                Error::misuse(
                    Misuse::Shape,
                    format!("'{label}': a {}x{} {format:?} texture", size.0, size.1),
                    format!("give a size that is a multiple of the {bw}x{bh} block"),
                )
            })?;
        let coarse: u64 = level_bytes[coarsest as usize..].iter().sum();
        if self.stats.resident_bytes + coarse > self.config.budget {
            return Err(Error::OutOfMemory(Box::new(OutOfMemory {
                requested: coarse,
                label: label.to_string(),
                pool: "mip streamer".into(),
                limit: Limit::Budget,
                allocated: self.stats.resident_bytes,
                reserved: self.stats.resident_bytes,
                limit_bytes: Some(self.config.budget),
                largest_free: self.config.budget - self.stats.resident_bytes,
                free_range_unusable: None,
                new_block: None,
                retries: 0,
                top_labels: Vec::new(),
                hint: "its coarsest levels must fit: raise MipConfig::budget or remove textures"
                    .into(),
            })));
        }
        let texture = self.create(label, format, size, coarsest, levels)?;
        self.upload_levels(source.as_ref(), &texture, coarsest, coarsest..levels)?;
        let generation = self.bump();
        let slot = Slot {
            label: label.to_string(),
            coarsest,
            wanted: coarsest,
            importance: 0.0,
            charge: self.account.charge(coarse),
            current: StreamedTexture {
                texture,
                generation,
                resident: coarsest,
            },
            level_bytes,
            source,
            pending: None,
        };
        self.stats.resident_bytes += coarse;
        self.stats.full_bytes += slot.level_bytes.iter().sum::<u64>();
        self.stats.textures += 1;
        let id = match self.slots.iter().position(Option::is_none) {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        };
        Ok(MipId(id as u32))
    }

    /// Removes a texture; its memory goes back at once (the GPU's last use permitting).
    pub fn remove(&mut self, id: MipId) -> Result<()> {
        let slot = self.slot(id)?;
        let (resident, full) = (slot.charge.bytes(), slot.level_bytes.iter().sum::<u64>());
        self.slots[id.0 as usize] = None;
        self.loader.cancel(id.0 as usize);
        self.stats.resident_bytes -= resident;
        self.stats.full_bytes -= full;
        self.stats.textures -= 1;
        Ok(())
    }

    /// The finest level `id`'s view needs (0: full resolution; see [`wanted_level`]) and
    /// how much it matters against the rest: the screen area it covers, in pixels, is
    /// what the plan's benefit per byte assumes (a level's worth is the area it sharpens).
    /// Levels past the chain's end mean its coarsest. A texture wanted coarser than it is
    /// keeps the finer levels it holds while the budget has room for them (they are given
    /// back as others need the bytes; lower the budget to give them back now).
    pub fn set_wanted(&mut self, id: MipId, level: u32, importance: f32) -> Result<()> {
        let slot = self.slot_mut(id)?;
        slot.wanted = level.min(slot.level_bytes.len() as u32 - 1);
        slot.importance = if importance.is_finite() {
            importance
        } else {
            0.0
        };
        Ok(())
    }

    /// Changes the budget; the next [`update`](Self::update) shrinks textures to fit. The
    /// coarsest levels stay: a budget below them is refused, with nothing changed.
    pub fn set_budget(&mut self, budget: u64) -> Result<()> {
        let floor: u64 = self
            .slots
            .iter()
            .flatten()
            .map(|s| s.level_bytes[s.coarsest as usize..].iter().sum::<u64>())
            .sum();
        if budget < floor {
            return Err(Error::misuse(
                Misuse::Length,
                format!("a mip budget of {budget} bytes, below the {floor} of every texture's coarsest levels"),
                "remove textures first, or keep the budget at or above that",
            ));
        }
        self.config.budget = budget;
        Ok(())
    }

    /// One frame: lands the growths whose levels are read, plans, shrinks, and starts the
    /// loads of new growths (module docs). Returns the bytes uploaded.
    pub fn update(&mut self) -> Result<u64> {
        let started = web_time::Instant::now();
        self.gpu.check_alive()?;
        let in_update = self.loader.enter_frame();
        // A loop that calls `update` back to back has no frame to protect: its shrinks
        // are all made at once, which keeps its textures trading levels fastest.
        let shrinks_in_frame = match in_update.in_frame_loop() {
            true => SHRINKS_IN_FRAME,
            false => usize::MAX,
        };
        // Staging ranges come back in work-done callbacks, which a poll runs.
        self.gpu.poll();
        let done = self.loader.finished();
        self.collect(done);
        let polled = web_time::Instant::now();
        let (ids, entries) = self.plan_entries(true);
        let targets = plan::plan(&entries, self.config.budget, self.config.upload_cap);
        let residents: Vec<u32> = entries.iter().map(|e| e.resident).collect();
        let mut frame = Frame::default();
        let mut shrinks = Vec::new();
        // The bytes held once this frame's shrinks are done: while over the budget, a
        // shrink is this frame's (the budget holds at the end of every update); past that
        // a frame makes SHRINKS_IN_FRAME at most, and the loaders prepare the rest as they
        // do growths, to land in a later frame.
        let mut held_after = self.stats.resident_bytes;
        // Shrinks first, so growths never stand on memory still to be given back.
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|&k| targets[k] < residents[k]);
        for k in order {
            let (i, target) = (ids[k], targets[k]);
            if target == residents[k] {
                continue;
            }
            let Some(slot) = self.slots[i].as_mut() else {
                continue;
            };
            let held = slot.current.resident;
            if let Some(p) = &slot.pending {
                if p.target < p.from && target < p.target {
                    // Sharper still: after this growth lands (one load spans at most one
                    // frame's cap, as the plan counted it).
                    continue;
                }
                slot.pending = None;
                self.loader.cancel(i);
                self.stats.loads_dropped += 1;
            }
            if target == held {
                continue;
            }
            if target > held
                && (held_after > self.config.budget || shrinks.len() < shrinks_in_frame)
            {
                // Fewer levels, needed now (or few so far): GPU copies only, this frame.
                held_after -= slot.bytes(held..target);
                shrinks.push(shrink::Shrink {
                    slot: i,
                    target,
                    spec: slot.spec(self.config.extra_usage),
                    held: slot.current.texture.clone(),
                    held_from: held,
                });
                continue;
            }
            // A growth, or a shrink the budget does not need at once: the loaders read
            // its levels (none for a shrink), make its texture and submit its copies.
            let serial = self.next_serial;
            self.next_serial += 1;
            slot.pending = Some(Pending {
                target,
                from: held,
                serial,
                loaded: None,
            });
            self.loader.push(loader::Job {
                slot: i,
                serial,
                source: slot.source.clone(),
                levels: target..held.max(target),
                texture: slot.spec(self.config.extra_usage),
                held: slot.current.texture.clone(),
                held_from: held,
            });
        }
        let planned = web_time::Instant::now();
        let shrink_count = shrinks.len();
        if !shrinks.is_empty() {
            self.shrink(&mut frame, shrinks)?;
        }
        let shrunk = web_time::Instant::now();
        // Without threads the loads just queued are read now, on this thread.
        if self.loader.inline() {
            let done = self.loader.finished();
            self.collect(done);
        }
        self.land(&mut frame, started)?;
        let landed = web_time::Instant::now();
        let growths = frame.growths;
        let submitted = self.finish(frame)?;
        let end = web_time::Instant::now();
        self.stats.last_update = LastUpdate {
            shrinks: shrink_count,
            growths,
            total: end - started,
            poll: polled - started,
            plan: planned - polled,
            shrink: shrunk - planned,
            land: landed - shrunk,
            submit: submitted - landed,
            upload: end - submitted,
        };
        Ok(self.stats.uploaded_last)
    }

    /// Waits until every load started by earlier updates has been read, the staging is
    /// full (the next update frees some), or `timeout` has passed, so that the next
    /// [`update`](Self::update) lands what can land: for a loading screen, or a test that
    /// counts frames apart from the loaders' speed.
    pub fn wait_for_loads(&mut self, timeout: std::time::Duration) -> Result<()> {
        let deadline = web_time::Instant::now() + timeout;
        let left = || deadline.saturating_duration_since(web_time::Instant::now());
        loop {
            let done = self.loader.wait_all(left(), true);
            self.collect(done);
            if !self.loader.starved() || left().is_zero() {
                return Ok(());
            }
            // A loader waits for room: what the GPU has copied out comes back once it is
            // idle (and a moment for the loaders to take it); room held by loads waiting
            // to land comes back only as they land.
            self.gpu.wait_idle()?;
            let done = self
                .loader
                .wait_all(left().min(std::time::Duration::from_millis(50)), false);
            let progressed = !done.is_empty();
            self.collect(done);
            if !progressed && self.loader.starved() {
                return Ok(());
            }
        }
    }

    /// Files finished loads with their slots; a load its slot no longer waits for (the
    /// plan dropped it, the texture was removed) is dropped, giving its staging back.
    fn collect(&mut self, done: Vec<loader::Loaded>) {
        for (job, levels) in done {
            let Some(Some(slot)) = self.slots.get_mut(job.slot) else {
                continue;
            };
            let Some(p) = slot.pending.as_mut().filter(|p| p.serial == job.serial) else {
                continue;
            };
            match levels {
                Ok(levels) => p.loaded = Some((job, levels)),
                Err(Error::OutOfMemory(_)) => {
                    // The device refused the growth's texture: kept as it is.
                    slot.pending = None;
                    self.stats.ooms += 1;
                }
                Err(e) => {
                    // The source failed: the texture stays as it is; the next plan asks
                    // again. Logged, not returned: the frame goes on for the rest.
                    log::warn!("mip streamer: loading '{}' failed: {e}", slot.label);
                    slot.pending = None;
                    self.stats.loads_dropped += 1;
                }
            }
        }
    }

    /// Lands loaded growths, most important first, within the frame's upload cap, the
    /// budget and the update's time target (counted from `started`); the rest wait for
    /// a later frame.
    fn land(&mut self, frame: &mut Frame, started: web_time::Instant) -> Result<()> {
        let mut ready: Vec<(f32, usize)> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
            .filter(|(_, s)| s.pending.as_ref().is_some_and(|p| p.loaded.is_some()))
            .map(|(i, s)| (s.importance, i))
            .collect();
        // Shrinks first (they make room), then growths by importance.
        let shrinking = |i: usize| {
            self.slots[i]
                .as_ref()
                .and_then(|s| s.pending.as_ref())
                .is_some_and(|p| p.target > p.from)
        };
        ready.sort_by(|a, b| {
            shrinking(b.1)
                .cmp(&shrinking(a.1))
                .then(b.0.total_cmp(&a.0))
        });
        // What the shrinks still being prepared will give back, counted once the loaded
        // ones have landed (they come first).
        let mut freeing: Option<u64> = None;
        for (_, i) in ready {
            let Some(slot) = self.slots[i].as_mut() else {
                continue;
            };
            let Some(p) = slot.pending.take() else {
                continue;
            };
            let Some((job, levels)) = p.loaded else {
                continue;
            };
            let bytes = levels.levels.bytes(&job);
            let new_bytes: u64 = slot.level_bytes[p.target as usize..].iter().sum();
            let after = self.stats.resident_bytes - slot.charge.bytes() + new_bytes;
            if p.from != slot.current.resident {
                // Planned against a texture that has changed: dropped.
                self.stats.loads_dropped += 1;
                continue;
            }
            if p.target > p.from {
                // A shrink: it only gives memory back.
                self.land_loaded(frame, i, p.target, job, levels);
                continue;
            }
            if after > self.config.budget {
                let freeing = *freeing.get_or_insert_with(|| {
                    self.slots
                        .iter()
                        .flatten()
                        .filter_map(|s| s.pending.as_ref().map(|p| (s, p)))
                        .filter(|(_, p)| p.target > p.from)
                        .map(|(s, p)| s.bytes(p.from..p.target))
                        .sum()
                });
                let Some(slot) = self.slots[i].as_mut() else {
                    continue;
                };
                if after.saturating_sub(freeing) > self.config.budget {
                    // Planned against a budget that has changed: dropped.
                    self.stats.loads_dropped += 1;
                } else {
                    // Room comes with shrinks still being prepared: it waits for them
                    // (a plan that no longer wants it drops it).
                    slot.pending = Some(Pending {
                        loaded: Some((job, levels)),
                        ..p
                    });
                }
                continue;
            }
            if bytes > self.config.upload_cap {
                // Cannot land in any frame (the plan spans at most a cap): dropped.
                self.stats.loads_dropped += 1;
                continue;
            }
            if frame.uploaded + bytes > self.config.upload_cap
                || frame.growths >= self.config.growths_per_frame.max(1)
                || (frame.growths > 0
                    && past_time_target(
                        self.config.update_time_target,
                        &self.submit_cost,
                        frame,
                        started,
                    ))
            {
                // Over this frame's cap: it lands in a later frame.
                slot.pending = Some(Pending {
                    loaded: Some((job, levels)),
                    ..p
                });
                continue;
            }
            self.land_loaded(frame, i, p.target, job, levels);
            frame.uploaded += bytes;
            frame.growths += 1;
        }
        Ok(())
    }

    /// Records the frame's shrinks (`shrink.rs`) and swaps their textures in; a texture
    /// the device refused keeps its slot as it was.
    fn shrink(&mut self, frame: &mut Frame, shrinks: Vec<shrink::Shrink>) -> Result<()> {
        let recorded = shrink::record(&self.gpu, &shrinks)?;
        frame.copies += recorded.copy_count;
        frame.shrunk = recorded.copies;
        for (s, texture) in shrinks.into_iter().zip(recorded.textures) {
            match texture {
                Some(texture) => self.install(frame, s.slot, s.target, texture),
                None => self.stats.ooms += 1,
            }
        }
        Ok(())
    }

    /// Submits the frame's shrinks, hands what the frame replaced to the epoch after it,
    /// then uploads its heap loads through the uploader; counts the frame.
    /// Returns when the submit was done (the heap loads' uploads follow it).
    fn finish(&mut self, mut frame: Frame) -> Result<web_time::Instant> {
        if let Some(shrunk) = frame.shrunk.take() {
            let submitting = web_time::Instant::now();
            self.gpu.scoped("submitting mip-streaming copies", || {
                self.gpu.submit([shrunk])
            })?;
            self.submit_cost
                .observe(frame.copies, submitting.elapsed().as_secs_f64());
        }
        if !frame.retired.is_empty() {
            // The textures replaced go to the loader's reaper once the GPU is done with
            // them, which releases their memory off this thread (freeing device memory
            // takes a driver a while).
            let (retired, reaper) = (frame.retired, self.loader.reaper());
            self.gpu.work_epoch_then(move || reaper.retire(retired));
        }
        let submitted = web_time::Instant::now();
        for (texture, base, job, levels) in frame.heap {
            self.upload_heap(&texture, base, &job, levels)?;
        }
        self.stats.frames += 1;
        self.stats.uploaded_last = frame.uploaded;
        self.stats.uploaded_total += frame.uploaded;
        if frame.uploaded > self.config.upload_cap {
            self.stats.uploads_over_cap += 1;
        }
        self.stats.peak_resident_bytes = self
            .stats
            .peak_resident_bytes
            .max(self.stats.resident_bytes);
        Ok(submitted)
    }

    /// What `id` holds now.
    pub fn texture(&self, id: MipId) -> Result<StreamedTexture> {
        Ok(self.slot(id)?.current.clone())
    }

    /// The streamer's figures.
    pub fn stats(&self) -> MipStats {
        let mut s = self.stats.clone();
        s.budget = self.config.budget;
        s.short = self
            .slots
            .iter()
            .flatten()
            .filter(|t| t.current.resident > t.wanted)
            .count();
        s.loading = self
            .slots
            .iter()
            .flatten()
            .filter(|t| t.pending.is_some())
            .count();
        s
    }

    /// Per-texture figures, in id order.
    pub fn texture_stats(&self) -> Vec<(MipId, MipTextureStats)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
            .map(|(i, s)| {
                (
                    MipId(i as u32),
                    MipTextureStats {
                        label: s.label.clone(),
                        resident: s.current.resident,
                        wanted: s.wanted,
                        levels: s.level_bytes.len() as u32,
                        resident_bytes: s.charge.bytes(),
                        full_bytes: s.level_bytes.iter().sum(),
                    },
                )
            })
            .collect()
    }

    /// Whether every texture holds what it wants, as far as the budget allows: nothing
    /// left to grow or shrink.
    pub fn settled(&self) -> bool {
        if self.slots.iter().flatten().any(|s| s.pending.is_some()) {
            return false;
        }
        let (_, entries) = self.plan_entries(false);
        plan::plan(&entries, self.config.budget, u64::MAX)
            .iter()
            .zip(&entries)
            .all(|(t, e)| *t == e.resident)
    }

    /// The registered slots' indices and the plan's view of each; with `pending_as_held`,
    /// a growth being loaded counts as held (its bytes are spoken for).
    fn plan_entries(&self, pending_as_held: bool) -> (Vec<usize>, Vec<plan::Entry<'_>>) {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, s)))
            .map(|(i, s)| {
                let entry = plan::Entry {
                    level_bytes: &s.level_bytes,
                    resident: match &s.pending {
                        Some(p) if pending_as_held => p.target,
                        _ => s.current.resident,
                    },
                    wanted: s.wanted,
                    coarsest: s.coarsest,
                    importance: s.importance,
                };
                (i, entry)
            })
            .unzip()
    }

    fn slot(&self, id: MipId) -> Result<&Slot> {
        self.slots
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| unknown(id))
    }

    fn slot_mut(&mut self, id: MipId) -> Result<&mut Slot> {
        self.slots
            .get_mut(id.0 as usize)
            .and_then(Option::as_mut)
            .ok_or_else(|| unknown(id))
    }

    fn bump(&mut self) -> u64 {
        self.next_generation += 1;
        self.next_generation - 1
    }

    /// A texture holding the chain's levels `[from, levels)`.
    fn create(
        &self,
        label: &str,
        format: wgpu::TextureFormat,
        size: (u32, u32),
        from: u32,
        levels: u32,
    ) -> Result<wgpu::Texture> {
        let spec = TextureSpec {
            label: label.to_string(),
            format,
            size,
            levels,
            usage: self.config.extra_usage,
        };
        spec.create(&self.gpu, from)
    }

    /// Uploads the chain's levels `levels` into `texture`, which starts at chain level
    /// `base`; returns the bytes.
    fn upload_levels(
        &self,
        source: &dyn MipSource,
        texture: &wgpu::Texture,
        base: u32,
        levels: std::ops::Range<u32>,
    ) -> Result<u64> {
        let mut bytes = 0;
        for l in levels {
            let texels = source.read_level(l)?;
            self.upload_level(texture, base, source, l, &texels)?;
            bytes += texels.len() as u64;
        }
        Ok(bytes)
    }

    /// Uploads a heap load's levels into `texture` (whose level 0 is chain level `base`)
    /// through the uploader.
    fn upload_heap(
        &self,
        texture: &wgpu::Texture,
        base: u32,
        job: &loader::Job,
        levels: Vec<Vec<u8>>,
    ) -> Result<()> {
        for (l, texels) in job.levels.clone().zip(levels) {
            self.upload_level(texture, base, job.source.as_ref(), l, &texels)?;
        }
        Ok(())
    }

    /// Uploads chain level `level` of `source` (`texels`, tight rows) into `texture`,
    /// whose level 0 is chain level `base`, through the uploader.
    fn upload_level(
        &self,
        texture: &wgpu::Texture,
        base: u32,
        source: &dyn MipSource,
        level: u32,
        texels: &[u8],
    ) -> Result<()> {
        self.uploader.upload_texture(
            level_copy(texture, level, base),
            copy_extent(source.format(), source.size(), level),
            texels,
        )
    }

    /// Lands a loaded swap of slot `i` to level `target`, a growth or a shrink (the loader
    /// submitted its copies): its texture becomes the slot's, its heap levels join the
    /// frame's uploads, and its staging range goes back once those copies are done
    /// (`StagedRange::copied_by`).
    fn land_loaded(
        &mut self,
        frame: &mut Frame,
        i: usize,
        target: u32,
        job: loader::Job,
        landing: loader::Landing,
    ) {
        match landing.levels {
            loader::Levels::Staged(range, _) => drop(range),
            loader::Levels::Heap(levels) if !levels.is_empty() => {
                frame
                    .heap
                    .push((landing.texture.clone(), target, job, levels))
            }
            loader::Levels::Heap(_) => {}
        }
        self.install(frame, i, target, landing.texture);
    }

    /// Makes `texture`, holding the chain's levels `[target, levels)` (filled by copies
    /// submitted before it), slot `i`'s: a new generation, the slot's charge, and the old
    /// texture retired with the frame.
    fn install(&mut self, frame: &mut Frame, i: usize, target: u32, texture: wgpu::Texture) {
        let generation = self.bump();
        let Some(slot) = self.slots[i].as_mut() else {
            return;
        };
        let new_bytes: u64 = slot.level_bytes[target as usize..].iter().sum();
        let held = slot.charge.bytes();
        slot.charge.set(new_bytes);
        let old = std::mem::replace(
            &mut slot.current,
            StreamedTexture {
                texture,
                generation,
                resident: target,
            },
        );
        frame.retired.push(old.texture);
        self.stats.resident_bytes = self.stats.resident_bytes - held + new_bytes;
        self.stats.swaps += 1;
    }
}

/// Shrinks a frame loop's update makes on its own thread beyond those the budget needs at
/// once: each is a new texture, about 50-150 µs of a driver's time on an H200's host;
/// those past these the loaders prepare, to land a frame or two later. (A frame that
/// made 6-8 shrinks took 0.8-1.4 ms on the H200; with at most 3, `update`'s p99 read
/// 0.27-0.35 ms.)
const SHRINKS_IN_FRAME: usize = 3;

/// What a streamed texture is made of, but for the levels it holds.
#[derive(Clone, Debug)]
pub(crate) struct TextureSpec {
    pub label: String,
    pub format: wgpu::TextureFormat,
    pub size: (u32, u32),
    /// Levels of the full chain.
    pub levels: u32,
    /// Usages besides those the streamer always sets.
    pub usage: wgpu::TextureUsages,
}

impl TextureSpec {
    /// A texture holding the chain's levels `[from, levels)`, made on any thread (loaders
    /// make the textures of growths, so that their memory is not allocated on the frame
    /// thread).
    pub fn create(&self, gpu: &Gpu, from: u32) -> Result<wgpu::Texture> {
        let (w, h) = level_size(self.size, from);
        gpu.scoped("creating a mip-streamed texture", || {
            gpu.device().create_texture(&wgpu::TextureDescriptor {
                label: Some(&self.label),
                size: wgpu::Extent3d {
                    width: w,
                    height: h,
                    depth_or_array_layers: 1,
                },
                mip_level_count: self.levels - from,
                sample_count: 1,
                dimension: wgpu::TextureDimension::D2,
                format: self.format,
                usage: wgpu::TextureUsages::TEXTURE_BINDING
                    | wgpu::TextureUsages::COPY_DST
                    | wgpu::TextureUsages::COPY_SRC
                    | self.usage,
                view_formats: &[],
            })
        })
    }
}

/// Records copies of the chain's levels `levels` from `from` to `to` (each a texture and
/// the chain level its level 0 holds); returns how many.
pub(crate) fn copy_held_levels(
    encoder: &mut wgpu::CommandEncoder,
    from: (&wgpu::Texture, u32),
    to: (&wgpu::Texture, u32),
    levels: std::ops::Range<u32>,
    format: wgpu::TextureFormat,
    size: (u32, u32),
) -> usize {
    let count = levels.len();
    for l in levels {
        encoder.copy_texture_to_texture(
            level_copy(from.0, l, from.1),
            level_copy(to.0, l, to.1),
            copy_extent(format, size, l),
        );
    }
    count
}

/// Records copies of the chain's levels `levels`, staged in `range` as `placed` says,
/// into `to` (a texture and the chain level its level 0 holds); returns how many.
pub(crate) fn copy_staged_levels(
    encoder: &mut wgpu::CommandEncoder,
    range: &staging::StagedRange,
    placed: &[loader::Placed],
    to: (&wgpu::Texture, u32),
    levels: std::ops::Range<u32>,
    format: wgpu::TextureFormat,
    size: (u32, u32),
) -> usize {
    let count = levels.len();
    for (l, p) in levels.zip(placed) {
        encoder.copy_buffer_to_texture(
            wgpu::TexelCopyBufferInfo {
                buffer: range.buffer(),
                layout: wgpu::TexelCopyBufferLayout {
                    offset: range.offset() + p.offset,
                    bytes_per_row: Some(p.pitch),
                    rows_per_image: Some(p.rows),
                },
            },
            level_copy(to.0, l, to.1),
            copy_extent(format, size, l),
        );
    }
    count
}

/// Level `level` of the chain in `texture`, whose level 0 is the chain's level `base`.
fn level_copy(texture: &wgpu::Texture, level: u32, base: u32) -> wgpu::TexelCopyTextureInfo<'_> {
    wgpu::TexelCopyTextureInfo {
        texture,
        mip_level: level - base,
        origin: wgpu::Origin3d::ZERO,
        aspect: wgpu::TextureAspect::All,
    }
}

/// What one `update` submits: its shrinks' command buffer (`shrink.rs`; the loaders
/// submitted its growths' copies); the textures it replaced, handed to the epoch after
/// it; loads that go through the uploader after it, and the bytes it brings.
#[derive(Default)]
struct Frame {
    /// Copies the frame submits (its shrinks').
    copies: usize,
    /// The shrinks' command buffer.
    shrunk: Option<wgpu::CommandBuffer>,
    heap: Vec<(wgpu::Texture, u32, loader::Job, Vec<Vec<u8>>)>,
    /// Textures replaced this frame: released off this thread once the GPU is done.
    retired: Vec<wgpu::Texture>,
    uploaded: u64,
    growths: usize,
}

/// Whether an update begun at `started` is past `target_time`, counting what the frame's
/// copies (its shrinks') are predicted to cost the submit: then no more growths land.
fn past_time_target(
    target_time: Option<std::time::Duration>,
    submit_cost: &pacing::SubmitCost,
    frame: &Frame,
    started: web_time::Instant,
) -> bool {
    let Some(limit) = target_time else {
        return false;
    };
    let predicted = started.elapsed().as_secs_f64() + submit_cost.predict(frame.copies);
    predicted > limit.as_secs_f64()
}

fn unknown(id: MipId) -> Error {
    Error::misuse(
        Misuse::Foreign,
        format!("mip texture {} is not registered with this streamer", id.0),
        "use an id this streamer's add returned and that was not removed",
    )
}

#[cfg(feature = "metrics")]
impl MipStreamer {
    /// Publishes the streamer's figures through the `metrics` facade (feature `metrics`):
    /// gauges `vramkit_mip_resident_bytes`, `vramkit_mip_budget_bytes`,
    /// `vramkit_mip_full_bytes`, `vramkit_mip_textures`, `vramkit_mip_short_textures`,
    /// `vramkit_mip_uploaded_last_bytes`; counters `vramkit_mip_uploaded_bytes_total`,
    /// `vramkit_mip_swaps_total`, `vramkit_mip_out_of_memory_total`; each labelled with
    /// the device.
    pub fn publish_metrics(&self) {
        use metrics::{counter, gauge};
        let s = self.stats();
        let device = self.gpu.info().name.clone();
        let set =
            |name: &'static str, v: u64| gauge!(name, "device" => device.clone()).set(v as f64);
        set("vramkit_mip_resident_bytes", s.resident_bytes);
        set("vramkit_mip_budget_bytes", s.budget);
        set("vramkit_mip_full_bytes", s.full_bytes);
        set("vramkit_mip_textures", s.textures as u64);
        set("vramkit_mip_short_textures", s.short as u64);
        set("vramkit_mip_uploaded_last_bytes", s.uploaded_last);
        let total =
            |name: &'static str, v: u64| counter!(name, "device" => device.clone()).absolute(v);
        total("vramkit_mip_uploaded_bytes_total", s.uploaded_total);
        total("vramkit_mip_swaps_total", s.swaps);
        total("vramkit_mip_out_of_memory_total", s.ooms);
    }
}

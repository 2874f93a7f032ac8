//! The per-frame loop of a virtual texture: feedback in, requests to the loaders, ready
//! tiles uploaded into cache slots, the page table and parameters rewritten
//! ([`VirtualTexture::begin_frame`]); the feedback resolved and read back without
//! blocking ([`VirtualTexture::end_frame`]). The frame order and what it promises are in
//! the module docs of `vt`.

use web_time::Instant;

use futures::FutureExt;
use rustc_hash::FxHashSet as HashSet;

use super::*;

impl VirtualTexture {
    /// Asks for `tiles` ahead of feedback (a camera cut, a known next view): they are
    /// loaded before tiles requested by feedback, coarse levels first, and stay asked for
    /// across feedback lists until they are resident (or their source failed).
    pub fn prefetch(&mut self, tiles: &[TileId]) {
        let known: HashSet<TileId> = self.prefetched.iter().copied().collect();
        let mut extra: Vec<TileId> = tiles
            .iter()
            .copied()
            .filter(|&t| self.layout.contains(t) && !self.is_resident(t) && !known.contains(&t))
            .collect();
        extra.sort_by_key(|t| std::cmp::Reverse(t.level));
        self.prefetched.extend(extra);
        self.prefetched.sort_by_key(|t| std::cmp::Reverse(t.level));
        let wanted = std::mem::take(&mut self.wanted);
        self.wanted = self.with_prefetched(wanted);
        self.dispatch_loads();
    }

    /// `wanted` behind the prefetched tiles still missing (which are dropped once resident
    /// or failed), without duplicates.
    pub(super) fn with_prefetched(&mut self, wanted: Vec<TileId>) -> Vec<TileId> {
        let (slots, failed) = (&self.slots, &self.failed);
        self.prefetched
            .retain(|t| slots.slot_of(*t).is_none() && !failed.contains(t));
        let first: HashSet<TileId> = self.prefetched.iter().copied().collect();
        let mut out = self.prefetched.clone();
        out.extend(wanted.into_iter().filter(|t| !first.contains(t)));
        out
    }

    /// Starts a frame: reads the feedback lists that have come back, queues the missing
    /// tiles on the loader threads, uploads tiles that are ready (within the per-frame
    /// budget) and rewrites the page table. Record the work that samples after this.
    pub fn begin_frame(&mut self) -> Result<()> {
        self.gpu.check_alive()?;
        let start = Instant::now();
        self.frame += 1;
        self.stats.frames = self.frame;
        let mut requests: Option<Vec<TileId>> = None;
        while let Some((frame, fut)) = self.pending_feedback.front_mut() {
            let frame = *frame;
            let Some(result) = fut.as_mut().now_or_never() else {
                break;
            };
            self.pending_feedback.pop_front();
            requests = Some(self.read_list(frame, &result?));
        }
        if let Some(list) = requests {
            self.use_list(list);
        }
        // What the newest list asked for stays in use until the next list arrives: frames
        // without new feedback (its latency, or `settle`) must not make the tiles on
        // screen look unused and evict them for their own replacements.
        for i in 0..self.in_use.len() {
            if let Some(slot) = self
                .resident_ancestor(self.in_use[i])
                .and_then(|a| self.slots.slot_of(a))
            {
                self.slots.touch(slot, self.frame);
            }
        }
        self.collect_loaded();
        let residency = start.elapsed();
        self.upload_ready()?;
        let uploaded = start.elapsed();
        if self.table_dirty {
            self.write_table_and_params();
        } else {
            self.write_params();
        }
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        self.stats.cpu_ms_phases_last = [
            ms(residency),
            ms(uploaded - residency),
            ms(start.elapsed() - uploaded),
            0.0,
        ];
        self.begin_cpu = start.elapsed();
        Ok(())
    }

    /// The tiles a feedback list read back for `frame` asks for, with its statistics
    /// counted.
    fn read_list(&mut self, frame: u64, view: &[u8]) -> Vec<TileId> {
        let words: &[u32] = bytemuck::cast_slice(view);
        let count = words.first().copied().unwrap_or(0);
        let stored = count.min(self.max_list) as usize;
        self.stats.feedback_overflows += u64::from(count - stored as u32);
        self.stats.feedback_bytes_last = 4 * (1 + stored as u64);
        self.stats.feedback_frame_last = frame;
        self.stats.feedback_latency_frames_max = self
            .stats
            .feedback_latency_frames_max
            .max(self.frame - frame);
        words[1..1 + stored]
            .iter()
            .filter_map(|&k| TileId::from_key(k))
            .filter(|&t| self.layout.contains(t))
            .collect()
    }

    /// Makes `list`, the newest feedback list, what the frames request and keep in use.
    fn use_list(&mut self, list: Vec<TileId>) {
        self.take_requests(&list);
        self.in_use = list;
    }

    /// The nearest resident tile covering `tile` (itself included).
    pub(super) fn resident_ancestor(&self, mut tile: TileId) -> Option<TileId> {
        loop {
            if self.slots.slot_of(tile).is_some() {
                return Some(tile);
            }
            if tile.level + 1 >= self.layout.levels {
                return None;
            }
            tile = tile.parent();
        }
    }

    /// Turns one feedback list into the wanted queue and the residency bias.
    pub(super) fn take_requests(&mut self, list: &[TileId]) {
        self.stats.requests += list.len() as u64;
        self.stats.requests_last = list.len() as u32;
        let mut wanted = Vec::new();
        let mut seen = HashSet::default();
        for &t in list {
            if self.slots.slot_of(t).is_some() {
                self.stats.hits += 1;
                continue;
            }
            self.stats.misses += 1;
            // The tile and its missing ancestors, coarse first (sorted below).
            let mut a = t;
            loop {
                if self.slots.slot_of(a).is_some() {
                    break;
                }
                if !self.failed.contains(&a) && seen.insert(a) {
                    wanted.push(a);
                }
                if a.level + 1 >= self.layout.levels {
                    break;
                }
                a = a.parent();
            }
        }
        // Coarse before fine; within a level, in the order the feedback listed them;
        // prefetched tiles first.
        wanted.sort_by_key(|t| std::cmp::Reverse(t.level));
        self.wanted = self.with_prefetched(wanted);
        // Degrade instead of thrashing: when the view's tiles and their missing ancestors
        // (which stay in use as fallbacks until their children arrive) need more than the
        // unpinned slots, ask one level coarser. Relax when a level finer (about four
        // times the tiles) would fit with room to spare.
        let room = u64::from(self.config.cache_slots - self.stats.pinned_tiles);
        let hits = list
            .iter()
            .filter(|t| self.slots.slot_of(**t).is_some())
            .count();
        let n = (hits + self.wanted.len()) as u64;
        let settled = self.frame >= self.bias_changed_at + 4;
        if settled && 10 * n > 9 * room && self.stats.bias + 1 < self.layout.levels {
            self.stats.bias += 1;
            self.bias_changed_at = self.frame;
        } else if settled && self.stats.bias > 0 && 4 * n * 10 < 5 * room {
            self.stats.bias -= 1;
            self.bias_changed_at = self.frame;
        }
        self.dispatch_loads();
    }

    /// Queues the most wanted tiles that are neither loading, ready nor resident.
    pub(super) fn dispatch_loads(&mut self) {
        let depth = 4 * self.config.max_uploads_per_frame as usize;
        // Jobs not yet taken are re-ordered: take them back first.
        for t in self.loader.take_queued() {
            self.loading.remove(&t);
        }
        let in_flight = self.loading.len();
        let mut jobs = Vec::new();
        for &t in &self.wanted {
            if in_flight + jobs.len() >= depth {
                break;
            }
            if self.loading.contains(&t)
                || self.ready.contains_key(&t)
                || self.failed.contains(&t)
                || self.slots.slot_of(t).is_some()
            {
                continue;
            }
            jobs.push(t);
        }
        self.loading.extend(jobs.iter().copied());
        self.loader.push(jobs);
    }

    /// Files one loader result: ready bytes (with the frame they arrived in) or a counted,
    /// logged failure that is not asked for again.
    pub(super) fn take_loaded(&mut self, tile: TileId, result: Result<TileBytes>, frame: u64) {
        self.loading.remove(&tile);
        match result {
            Ok(bytes) => {
                self.ready.insert(tile, (frame, bytes));
            }
            Err(e) => {
                log::warn!("vramkit vt: {e}");
                self.stats.load_errors += 1;
                self.failed.insert(tile);
            }
        }
    }

    pub(super) fn collect_loaded(&mut self) {
        let frame = self.frame;
        let results = self.loader.finished();
        for (tile, result) in results {
            self.take_loaded(tile, result, frame);
        }
        // Ready tiles nobody placed for long are dropped (the view moved on); bounded.
        let cap = 4 * self.config.max_uploads_per_frame as usize;
        if self.ready.len() > cap {
            let mut by_age: Vec<(u64, TileId)> =
                self.ready.iter().map(|(t, (f, _))| (*f, *t)).collect();
            by_age.sort_unstable();
            for (_, t) in by_age.into_iter().take(self.ready.len() - cap) {
                self.ready.remove(&t);
            }
        }
    }

    /// Uploads ready tiles, coarse first, into free or least recently used slots.
    pub(super) fn upload_ready(&mut self) -> Result<()> {
        let mut order: Vec<TileId> = self.ready.keys().copied().collect();
        order.sort_by_key(|t| (std::cmp::Reverse(t.level), t.y, t.x));
        let mut placed = Vec::new();
        let mut bytes = 0u64;
        for tile in order {
            if placed.len() as u32 >= self.config.max_uploads_per_frame
                || bytes + self.tile_bytes as u64 > self.config.max_upload_bytes_per_frame
            {
                break;
            }
            let Some((slot, evicted)) =
                self.slots
                    .place(tile, self.frame, self.config.keep_frames, false)
            else {
                // Every slot is on screen: wait (the bias moves requests coarser).
                break;
            };
            if evicted.is_some() {
                self.stats.evictions += 1;
            }
            if let Some((since, data)) = self.ready.remove(&tile) {
                self.stats.upload_wait_frames_max =
                    self.stats.upload_wait_frames_max.max(self.frame - since);
                bytes += self.tile_bytes as u64;
                placed.push((tile, slot, data));
            }
        }
        if placed.is_empty() {
            self.stats.uploads_last = 0;
            return Ok(());
        }
        let (staged, heap): (Vec<_>, Vec<_>) = placed
            .into_iter()
            .partition(|p| matches!(p.2, TileBytes::Staged(_)));
        let n = self.upload_staged(staged)? + self.upload_heap(heap)?;
        self.stats.uploads += u64::from(n);
        self.stats.uploads_last = n;
        self.stats.uploads_max = self.stats.uploads_max.max(n);
        self.stats.bytes_streamed += bytes;
        self.table_dirty = true;
        Ok(())
    }

    /// Copies tiles the loaders decoded into tile staging: one copy command per tile, one
    /// submit; the slots go back once the GPU has copied them. Returns the tiles uploaded.
    pub(super) fn upload_staged(&mut self, placed: Vec<(TileId, u32, TileBytes)>) -> Result<u32> {
        if placed.is_empty() {
            return Ok(0);
        }
        let mut encoder =
            self.gpu
                .device()
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("vramkit vt staged tiles"),
                });
        let row = (self.tile_bytes / TILE as usize) as u32;
        let mut held = Vec::with_capacity(placed.len());
        for (tile, slot, data) in placed {
            let TileBytes::Staged(staged) = data else {
                continue;
            };
            encoder.copy_buffer_to_texture(
                wgpu::TexelCopyBufferInfo {
                    buffer: staged.buffer(),
                    layout: wgpu::TexelCopyBufferLayout {
                        offset: staged.offset(),
                        bytes_per_row: Some(row),
                        rows_per_image: Some(TILE),
                    },
                },
                wgpu::TexelCopyTextureInfo {
                    texture: &self.cache,
                    mip_level: 0,
                    origin: self.slot_origin(slot),
                    aspect: wgpu::TextureAspect::All,
                },
                TILE_EXTENT,
            );
            held.push((tile, staged));
        }
        let submitted = self
            .gpu
            .scoped("submitting virtual-texture tile copies", || {
                self.gpu.submit([encoder.finish()])
            });
        if let Err(e) = submitted {
            // Nothing of a failed upload may be mapped; the slots are free again.
            for (tile, _) in &held {
                self.slots.remove(*tile);
            }
            self.table_dirty = true;
            return Err(e);
        }
        let n = held.len() as u32;
        self.stats.uploads_staged += u64::from(n);
        // The staging slots go back to the loaders once the GPU has copied them.
        self.gpu.work_epoch_then(move || drop(held));
        Ok(n)
    }

    /// Uploads tiles in ordinary memory through the uploader, tiles in neighbouring slots
    /// in one copy. Returns the tiles uploaded.
    pub(super) fn upload_heap(&mut self, mut placed: Vec<(TileId, u32, TileBytes)>) -> Result<u32> {
        if placed.is_empty() {
            return Ok(0);
        }
        // In slot order, so tiles in neighbouring slots go up in one copy.
        placed.sort_unstable_by_key(|p| p.1);
        let tiles: Vec<_> = placed
            .iter()
            .filter_map(|(_, slot, data)| match data {
                TileBytes::Heap(bytes) => Some((self.slot_origin(*slot), &bytes[..])),
                TileBytes::Staged(_) => None,
            })
            .collect();
        if let Err(e) = self
            .uploader
            .upload_texture_tiles(&self.cache, TILE_EXTENT, &tiles)
        {
            // Nothing of a failed upload may be mapped.
            for (tile, _, _) in &placed {
                self.slots.remove(*tile);
            }
            self.table_dirty = true;
            return Err(e);
        }
        Ok(tiles.len() as u32)
    }

    pub(super) fn write_table_and_params(&mut self) {
        let table = PageTable::build(self.slots.resident(), self.table_capacity);
        self.max_probe = table.max_probe;
        let b = &self.buffers.table;
        self.gpu
            .write_buffer(b.buffer(), b.offset(), bytemuck::cast_slice(&table.entries));
        self.table_dirty = false;
        self.write_params();
    }

    pub(super) fn write_params(&self) {
        let size = self.cache.size();
        let p = GpuParams {
            size: [self.layout.width, self.layout.height],
            levels: self.layout.levels,
            table_mask: self.table_capacity - 1,
            slots_x: self.slots_x,
            max_probe: self.max_probe,
            bias: self.stats.bias,
            frame: self.frame as u32,
            feedback_size: feedback_size(&self.config),
            feedback_factor: self.config.feedback_factor,
            pad0: 0,
            cache_texels: [size.width as f32, size.height as f32],
            pad1: [0.0; 2],
        };
        let b = &self.buffers.params;
        self.gpu
            .write_buffer(b.buffer(), b.offset(), bytemuck::bytes_of(&p));
    }

    /// Ends a frame whose sampling work has been submitted: compacts its feedback on the
    /// GPU, starts reading the list back (picked up by a later `begin_frame`) and clears
    /// the feedback for the next frame.
    pub fn end_frame(&mut self) -> Result<()> {
        self.gpu.check_alive()?;
        let start = Instant::now();
        let list = &self.buffers.list;
        let mut encoder =
            self.gpu
                .device()
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("vramkit vt feedback"),
                });
        self.record_resolve(&mut encoder);
        self.gpu.submit([encoder.finish()]);
        // In the browser the oldest list cannot be waited for: with three in flight this
        // frame's list is not read (the next frame's resolve overwrites it).
        if !(cfg!(web) && self.pending_feedback.len() >= 3) {
            let fut = self.downloader.download_async(list, 0, list.size())?;
            self.pending_feedback.push_back((self.frame, Box::pin(fut)));
        }
        // Bounded: a GPU far behind makes the CPU wait for the oldest list (counted as
        // waiting, not as CPU work).
        let waiting = Instant::now();
        while self.pending_feedback.len() > 3 {
            if let Some((_, fut)) = self.pending_feedback.pop_front() {
                drop(pollster::block_on(fut)?);
            }
        }
        let waited = waiting.elapsed();
        let cpu = std::mem::take(&mut self.begin_cpu) + start.elapsed() - waited;
        self.stats.cpu_ms_last = cpu.as_secs_f64() * 1e3;
        self.stats.wait_ms_last = waited.as_secs_f64() * 1e3;
        self.stats.cpu_ms_phases_last[3] = (start.elapsed() - waited).as_secs_f64() * 1e3;
        Ok(())
    }

    /// Clears the list's count (the previous frame's read-back of it was submitted
    /// before, so queue order keeps it), compacts the feedback into it, and clears the
    /// feedback and the set for the next frame: one submit, where there were two.
    pub(super) fn record_resolve(&self, encoder: &mut wgpu::CommandEncoder) {
        let list = &self.buffers.list;
        encoder.clear_buffer(list.buffer(), list.offset(), Some(4));
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&self.compact.0);
            pass.set_bind_group(0, &self.compact.1, &[]);
            let (gx, gy) = crate::gpu::grid(u64::from(self.feedback_cells), 256, &self.gpu);
            pass.dispatch_workgroups(gx, gy, 1);
        }
        for a in [&self.buffers.feedback, &self.buffers.set] {
            encoder.clear_buffer(a.buffer(), a.offset(), Some(a.size()));
        }
    }

    /// Waits until every tile wanted so far is loaded and uploaded (or failed), running
    /// frames without new feedback: for tests and for a view that must be exact now.
    pub fn settle(&mut self, max_frames: u32) -> Result<u32> {
        for n in 0..max_frames {
            if self
                .wanted
                .iter()
                .all(|t| self.is_resident(*t) || self.failed.contains(t))
                && self.ready.is_empty()
                && self.loading.is_empty()
            {
                return Ok(n);
            }
            if !self.loading.is_empty() && self.ready.is_empty() {
                if let Some((tile, result)) = self.loader.next() {
                    self.take_loaded(tile, result, self.frame);
                }
            }
            self.begin_frame()?;
            self.dispatch_loads();
        }
        Ok(max_frames)
    }

    /// [`settle`](Self::settle) without blocking, the browser's way: first awaits every
    /// feedback list in flight (WebGPU maps them only after the page yields) and takes the
    /// newest one's requests, then runs the frames (tiles are read on this thread there).
    ///
    /// ```no_run
    /// # async fn page(vt: &mut vramkit::vt::VirtualTexture) -> vramkit::Result<()> {
    /// // ... frames rendered with begin_frame / your pass / end_frame ...
    /// vt.settle_async(8).await?; // every tile the last list asked for is resident
    /// # Ok(()) }
    /// ```
    pub async fn settle_async(&mut self, max_frames: u32) -> Result<u32> {
        let mut requests = None;
        while let Some((frame, fut)) = self.pending_feedback.pop_front() {
            let view = fut.await?;
            requests = Some(self.read_list(frame, &view));
        }
        if let Some(list) = requests {
            self.use_list(list);
        }
        self.settle(max_frames)
    }
}

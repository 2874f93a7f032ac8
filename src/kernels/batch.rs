//! A batch: kernels recorded into one command encoder, their parameter blocks in one
//! ring of the arena's kernel pool, submitted (or timed) together. Also the checks every
//! kernel runs on its inputs before recording (counts, shapes, lengths, overlaps).

use std::marker::PhantomData;

use super::*;

/// Dispatches recorded into one encoder, submitted together by [`Batch::submit`].
///
/// The batch borrows every allocation it is given until it is submitted (or dropped), so
/// an allocation cannot be freed, and its range handed out again, while a recorded kernel
/// still has to run on it. This does not compile:
///
/// ```compile_fail,E0505
/// # let gpu = vramkit::Gpu::headless()?;
/// # let arena = vramkit::Arena::new(&gpu, Default::default())?;
/// # let kernels = vramkit::kernels::Kernels::new(&arena)?;
/// let x = arena.alloc(4096, "x")?;
/// let mut batch = kernels.batch();
/// batch.fill(1.0, (&x, 1024))?;
/// drop(x); // error: `x` is still borrowed by the batch
/// batch.submit()?;
/// # Ok::<(), vramkit::Error>(())
/// ```
///
/// Kernel methods return `&mut Self` so calls chain; each checks its arguments (element
/// counts against allocation sizes, shapes) and records nothing when it returns an error.
pub struct Batch<'a> {
    pub(super) kernels: &'a Kernels,
    pub(super) encoder: wgpu::CommandEncoder,
    pub(super) pass: Option<wgpu::ComputePass<'static>>,
    /// Uniform allocations holding this batch's parameter slots; the last one is filling.
    pub(super) chunks: Vec<Allocation>,
    /// Scratch this batch's kernels write and read (an f16-output product's f32 sums),
    /// freed with the batch: after its work, as every allocation's range is.
    pub(super) scratch: Vec<Allocation>,
    /// Parameter bytes of the chunk being filled, written to it when it is full or at submit.
    pub(super) staged: Vec<u8>,
    pub(super) dispatches: usize,
    /// Timestamp queries of this batch while profiling is on (`gpu/profile.rs`).
    pub(super) profile: Option<BatchProfile>,
    /// A dry run's batch: arguments are checked and parameter memory is allocated as in a
    /// real run, but nothing is written or dispatched.
    pub(super) dry: bool,
    pub(super) _borrows: PhantomData<&'a Allocation>,
}

/// Fails when `n` elements cannot be indexed with 32-bit invocation indices.
pub(super) fn check_count(n: u64, what: &str) -> Result<()> {
    if n > u32::MAX as u64 {
        return Err(Error::misuse(
            crate::Misuse::Shape,
            format!("{what}: {n} elements exceed the 2^32 - 1 a kernel indexes"),
            "split the work",
        ));
    }
    Ok(())
}

/// Checks a `rows x cols` shape: non-empty and indexable with 32-bit indices; returns
/// the element count.
pub(super) fn shape(rows: u64, cols: u64, what: &str) -> Result<u64> {
    if rows == 0 || cols == 0 {
        return Err(Error::misuse(
            crate::Misuse::Shape,
            format!("{what} of a {rows} x {cols} matrix"),
            "pass at least one row and one column",
        ));
    }
    rows.checked_mul(cols)
        .filter(|&n| n <= u32::MAX as u64)
        .ok_or_else(|| {
            Error::misuse(
                crate::Misuse::Shape,
                format!("{what}: {rows} x {cols} elements exceed the 2^32 - 1 a kernel indexes"),
                "split the matrix",
            )
        })
}

/// True when `a` and `b` share bytes (for kernels whose output must not alias an input).
pub(super) fn overlaps(a: &Allocation, b: &Allocation) -> bool {
    a.buffer() == b.buffer()
        && a.offset() < b.offset() + b.size()
        && b.offset() < a.offset() + a.size()
}

/// Fails when output `out` shares bytes with input `x` (`what` names the kernel). With
/// `in_place`, the very same range is allowed: kernels whose every invocation reads an
/// element before writing that same element (elementwise maps, row softmax) work in
/// place; any other overlap would let one invocation overwrite what another still reads.
pub(super) fn check_no_overlap(
    x: &Allocation,
    out: &Allocation,
    in_place: bool,
    what: &str,
) -> Result<()> {
    // In the browser WebGPU refuses one range bound twice for writing in a dispatch, and
    // every binding of the writable layout is: no kernel runs in place there.
    let in_place = in_place && !cfg!(web);
    if !overlaps(x, out) || (in_place && x.offset() == out.offset()) {
        return Ok(());
    }
    let allowed = if cfg!(web) {
        "into an allocation of its own (in the browser WebGPU refuses a range bound twice \
         for writing in one dispatch, so kernels do not run in place there)"
    } else if in_place {
        "in place (the same allocation as input and output) or into a range of its own"
    } else {
        "into an allocation of its own (this kernel cannot run in place)"
    };
    Err(Error::misuse(
        crate::Misuse::Overlap,
        format!(
            "{what}: output '{}' overlaps input '{}'",
            out.label(),
            x.label()
        ),
        format!("write the result {allowed}"),
    ))
}

impl<'a> Batch<'a> {
    /// Spare range `k` (0 or 1), for a binding the dispatch leaves unused (`bind::spare`).
    pub(super) fn spare(&self, k: u64) -> super::bind::Bound {
        super::bind::spare(&self.kernels.shared.spare, k)
    }

    /// `n` f32s of scratch from the kernels' arena, held until the batch is dropped
    /// (their range comes back once the work recorded here has run).
    pub(super) fn scratch_f32(&mut self, n: u64, label: &str) -> Result<super::bind::Bound> {
        let bytes = n.checked_mul(4).ok_or_else(|| {
            Error::misuse(
                crate::Misuse::Length,
                format!("{label}: {n} f32s of scratch"),
                "split the work",
            )
        })?;
        let scratch = self.kernels.arena.alloc(bytes, label)?;
        let bound = super::bind::Bound::of(&scratch);
        self.scratch.push(scratch);
        Ok(bound)
    }

    /// Checks a kernel operand before anything is recorded: that it lives on this batch's
    /// device (an allocation of another `Gpu` would name a buffer id that means another
    /// buffer here), in a buffer kernels can bind (`STORAGE`), no larger than one storage
    /// binding, and holds `n` elements of `elem_bytes` each (f16 counts round up to words).
    pub(super) fn check_len(
        &self,
        a: &Allocation,
        n: u64,
        elem_bytes: u64,
        name: &str,
    ) -> Result<()> {
        let gpu = self.gpu();
        gpu.check_alive()?;
        a.check_device(gpu, &format!("kernel operand {name}"))?;
        if !a.buffer().usage().contains(wgpu::BufferUsages::STORAGE) {
            return Err(Error::misuse(
                crate::Misuse::Usage,
                format!(
                    "{name} ('{}') lives in a buffer without STORAGE usage ({:?})",
                    a.label(),
                    a.buffer().usage()
                ),
                "allocate kernel operands from a pool whose usage includes STORAGE",
            ));
        }
        let max = gpu.limits().max_storage_buffer_binding_size;
        if a.size() > max {
            return Err(Error::misuse(
                crate::Misuse::Length,
                format!(
                    "{name} ('{}') is {} bytes, more than the device's storage-binding limit \
                     of {max} bytes that one kernel operand can be",
                    a.label(),
                    a.size()
                ),
                "split the data into allocations of at most the binding limit (see \
                 Gpu::limits().max_storage_buffer_binding_size)",
            ));
        }
        let need = n
            .checked_mul(elem_bytes)
            .map(|b| b.next_multiple_of(4))
            .filter(|&b| b <= a.size());
        if need.is_none() {
            return Err(Error::misuse(
                crate::Misuse::Length,
                format!(
                    "{name} ('{}') holds {} elements of {elem_bytes} bytes, the kernel needs {n}",
                    a.label(),
                    a.size() / elem_bytes
                ),
                format!(
                    "allocate at least {} bytes",
                    n.saturating_mul(elem_bytes).next_multiple_of(4)
                ),
            ));
        }
        Ok(())
    }

    pub(super) fn check_f32(&self, a: &Allocation, n: u64, name: &str) -> Result<()> {
        self.check_len(a, n, 4, name)
    }

    /// Number of kernel calls recorded so far.
    pub fn len(&self) -> usize {
        self.dispatches
    }

    /// True when nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.dispatches == 0
    }

    pub(super) fn gpu(&self) -> &'a Gpu {
        self.kernels.arena.gpu()
    }

    pub(super) fn slots_used(&self) -> u64 {
        self.staged.len() as u64 / self.kernels.stride
    }

    /// Makes sure the current chunk has `slots` free parameter slots.
    pub(super) fn reserve_slots(&mut self, slots: u64) -> Result<()> {
        if !self.chunks.is_empty() && self.slots_used() + slots <= SLOTS_PER_CHUNK {
            return Ok(());
        }
        self.flush_params();
        let k = self.kernels;
        let chunk = k
            .arena
            .alloc_in(k.params, SLOTS_PER_CHUNK * k.stride, "kernel params")?;
        // Initialise the whole chunk now, before any dispatch that reads it is recorded.
        // wgpu zero-fills buffer ranges that are uninitialised when a command buffer is
        // recorded; a slot written only at submit could be zeroed after our write when
        // another thread's submission flushes it first (seen as kernels that did nothing).
        if !self.dry {
            let zeros = vec![0u8; chunk.size() as usize];
            k.arena
                .gpu()
                .write_buffer(chunk.buffer(), chunk.offset(), &zeros);
        }
        self.chunks.push(chunk);
        Ok(())
    }

    pub(super) fn flush_params(&mut self) {
        if let Some(chunk) = self.chunks.last() {
            if !self.staged.is_empty() && !self.dry {
                self.kernels
                    .arena
                    .gpu()
                    .write_buffer(chunk.buffer(), chunk.offset(), &self.staged);
            }
        }
        self.staged.clear();
    }

    pub(super) fn push_params(&mut self, p: &Params) -> u32 {
        let offset = self.staged.len();
        self.staged.extend_from_slice(bytemuck::bytes_of(p));
        self.staged.resize(offset + self.kernels.stride as usize, 0);
        offset as u32
    }

    pub(super) fn pass(&mut self) -> &mut wgpu::ComputePass<'static> {
        let encoder = &mut self.encoder;
        self.pass.get_or_insert_with(|| {
            encoder
                .begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("vramkit batch"),
                    timestamp_writes: None,
                })
                .forget_lifetime()
        })
    }

    /// Records one dispatch of a kernel that uses the shared layout: its parameters go into
    /// the next slot of the batch's uniform ring.
    pub(super) fn dispatch(
        &mut self,
        name: &'static str,
        pipeline: &wgpu::ComputePipeline,
        params: Params,
        io: Bindings,
        (gx, gy, gz): (u32, u32, u32),
    ) -> Result<()> {
        self.reserve_slots(1)?;
        if self.dry {
            // The parameter slot is taken (its memory counts); nothing is recorded.
            self.push_params(&params);
            return Ok(());
        }
        let k = self.kernels;
        let bind = {
            let chunk = self
                .chunks
                .last()
                .ok_or_else(|| Error::invalid("no parameter chunk", "internal"))?;
            k.bind_group(chunk, io)
        };
        let offset = self.push_params(&params);
        // Profiling: a pass of its own, timed at its beginning and end, ended after it.
        let timed = match self.profile.as_mut().and_then(|p| p.next(name)) {
            Some(writes) => {
                // The shared pass must end before another begins on the encoder.
                self.pass = None;
                self.pass = Some(
                    self.encoder
                        .begin_compute_pass(&wgpu::ComputePassDescriptor {
                            label: Some(name),
                            timestamp_writes: Some(writes),
                        })
                        .forget_lifetime(),
                );
                true
            }
            None => false,
        };
        let pass = self.pass();
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &bind, &[offset]);
        pass.dispatch_workgroups(gx, gy, gz);
        if timed {
            self.pass = None;
        }
        Ok(())
    }

    /// One kernel call that is a single dispatch of `entry` in `shader`, counted as one call.
    pub(super) fn record(
        &mut self,
        shader: &shaders::Shader,
        entry: &'static str,
        params: Params,
        io: Bindings,
        groups: (u32, u32),
    ) -> Result<()> {
        self.run(shader, entry, params, io, groups)?;
        self.dispatches += 1;
        Ok(())
    }

    /// [`record`](Self::record) on a 3-D grid: `groups.2` copies of the 2-D grid, told
    /// apart by `workgroup_id.z` (a batch of independent problems).
    pub(super) fn record_3d(
        &mut self,
        shader: &shaders::Shader,
        entry: &'static str,
        params: Params,
        io: Bindings,
        groups: (u32, u32, u32),
    ) -> Result<()> {
        let pipeline = self.kernels.pipeline(shader, entry, &io)?;
        self.dispatch(entry, &pipeline, params, io, groups)?;
        self.dispatches += 1;
        Ok(())
    }

    /// Dispatches `entry` of `shader` on `io`, in the pipeline layout `io` asks for, without
    /// counting a kernel (one kernel may take several dispatches).
    pub(super) fn run(
        &mut self,
        shader: &shaders::Shader,
        entry: &'static str,
        params: Params,
        io: Bindings,
        groups: (u32, u32),
    ) -> Result<()> {
        let pipeline = self.kernels.pipeline(shader, entry, &io)?;
        self.dispatch(entry, &pipeline, params, io, (groups.0, groups.1, 1))
    }

    /// The encoder, to record copies or passes of your own between kernels. Ends the
    /// batch's current compute pass; the next kernel starts a new one.
    pub fn encoder(&mut self) -> &mut wgpu::CommandEncoder {
        self.pass = None;
        &mut self.encoder
    }

    /// Submits everything recorded, in order. Parameter allocations are released after the
    /// submit (and reused only once this work is done).
    pub fn submit(self) -> Result<wgpu::SubmissionIndex> {
        self.submit_with(|gpu, commands| gpu.submit([commands]))
    }

    /// Submits everything recorded, as [`submit`](Self::submit) does, waits for it, and
    /// returns how long the GPU took from the batch's first command to its last
    /// ([`Gpu::time_submission`]: timestamps where the adapter has them inside encoders,
    /// else the wall clock, as [`Timing::source`] says).
    ///
    /// ```no_run
    /// # let gpu = vramkit::Gpu::headless()?;
    /// # let arena = vramkit::Arena::new(&gpu, Default::default())?;
    /// let kernels = vramkit::kernels::Kernels::new(&arena)?;
    /// let x = arena.alloc_typed::<f32>(1 << 20, "x")?;
    /// let y = arena.alloc_typed::<f32>(1 << 20, "y")?;
    /// let mut batch = kernels.batch();
    /// batch.axpy(2.0, &x, &y)?;
    /// let t = batch.submit_timed()?;
    /// println!("{:.1} us on the GPU", t.seconds * 1e6);
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn submit_timed(self) -> Result<Timing> {
        // Only the submission in the batch's error scope; the wait outside it.
        self.submit_with(|gpu, commands| gpu.submit_timestamped([commands]))?
            .wait()
    }

    pub(super) fn submit_with<T>(
        mut self,
        submit: impl FnOnce(&Gpu, wgpu::CommandBuffer) -> T,
    ) -> Result<T> {
        self.pass = None;
        let kernels = self.kernels;
        let gpu = kernels.arena.gpu().clone();
        // The parameters are queued writes: in the scope too, as the submit is.
        gpu.scoped("queueing a kernel batch's parameters", || {
            self.flush_params()
        })?;
        let profile = self
            .profile
            .take()
            .and_then(|p| p.finish(kernels.arena.gpu(), &mut self.encoder));
        let encoder = self.encoder;
        let submitted = gpu.scoped("submitting a kernel batch", || {
            submit(&gpu, encoder.finish())
        })?;
        // After `Device::destroy` wgpu drops a submission without a word: a poll (no lock
        // held; it runs callbacks) lets it run the device-lost callback, so a batch on a
        // destroyed device says so. Cheap beside the batch's own submit; plain `Gpu::submit` (uploads, copies) does not pay it, and a
        // loss shows there at the next wait.
        gpu.notice_loss()?;
        #[cfg(feature = "metrics")]
        metrics::counter!("vramkit_kernels_dispatched_total").increment(self.dispatches as u64);
        if let Some((names, readback)) = profile {
            gpu.profiled_submitted(names, readback);
        }
        drop(self.chunks);
        Ok(submitted)
    }
}

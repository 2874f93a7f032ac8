//! Diagnostics of a virtual texture: GPU time of the feedback resolve, sampling at given
//! points through the same WGSL the host's shaders use (what the reference sampler is
//! compared with), and the count of samples that found no resident tile.

use super::*;

impl VirtualTexture {
    /// GPU time of what [`end_frame`](Self::end_frame) records for the feedback
    /// (compaction and clears, not the read-back copy), for benchmarks: the feedback
    /// buffer is compacted as it stands.
    pub fn time_feedback_resolve(&self) -> Result<crate::Timing> {
        self.gpu.time(|encoder| self.record_resolve(encoder))
    }

    /// Samples the texture on the GPU at `points` (`(uv, level)`), as a compute shader
    /// calling `vt_sample_level` does: what tests and tools compare with
    /// [`ReferenceSampler`]. Blocks until the results are read back; RGBA in 0..1.
    ///
    /// The points go into the `vt-read` pool of `arena` and the results into its default
    /// pool (one dispatch may not read and write one buffer).
    pub fn sample_points(
        &self,
        arena: &Arena,
        points: &[([f32; 2], u32)],
    ) -> Result<Vec<[f32; 4]>> {
        if points.is_empty() {
            return Ok(Vec::new());
        }
        let device = self.gpu.device();
        let probe_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("vramkit vt probe"),
            entries: &[
                storage_entry(0, true, wgpu::ShaderStages::COMPUTE),
                storage_entry(1, false, wgpu::ShaderStages::COMPUTE),
            ],
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("vramkit vt probe"),
            bind_group_layouts: &[Some(&self.bind_layout), Some(&probe_layout)],
            immediate_size: 0,
        });
        let pipeline = self.gpu.pipeline_with_layout(
            &shaders::VT_PROBE,
            "probe",
            crate::shaders::NamedLayout {
                name: "vt-probe",
                layout: &pipeline_layout,
            },
        )?;
        let input: Vec<u32> = points
            .iter()
            .flat_map(|&(uv, level)| [uv[0].to_bits(), uv[1].to_bits(), level, 0])
            .collect();
        if !arena.gpu().same_device(&self.gpu) {
            return Err(Error::misuse(
                crate::Misuse::Foreign,
                "sample_points with an arena of another Gpu",
                "pass the arena this virtual texture was created on",
            ));
        }
        let read_pool = arena.pool(POOLS[0]).ok_or_else(|| {
            Error::misuse(
                crate::Misuse::Foreign,
                "sample_points with an arena this virtual texture was not created on",
                "pass the same arena",
            )
        })?;
        let src = arena.alloc_in(read_pool, input.len() as u64 * 4, "vt probe points")?;
        let dst = arena.alloc(points.len() as u64 * 16, "vt probe results")?;
        self.gpu
            .write_buffer(src.buffer(), src.offset(), bytemuck::cast_slice(&input));
        let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("vramkit vt probe"),
            layout: &probe_layout,
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: src.binding_resource(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: dst.binding_resource(),
                },
            ],
        });
        let mut encoder = device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &self.bind_group, &[]);
            pass.set_bind_group(1, &group, &[]);
            let (gx, gy) = crate::gpu::grid(points.len() as u64, 64, &self.gpu);
            pass.dispatch_workgroups(gx, gy, 1);
        }
        self.gpu.scoped("sampling a virtual texture", || {
            self.gpu.submit([encoder.finish()])
        })?;
        let bytes = self.downloader.download(&dst, 0, dst.size())?;
        let floats: &[f32] = bytemuck::cast_slice(&bytes);
        Ok(floats
            .chunks_exact(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect())
    }

    /// Samples the shaders found with no resident tile (0 while the coarsest level is
    /// pinned); read back from the shaders' own counter, blocking.
    pub fn unmapped_samples(&self) -> Result<u64> {
        let c = &self.buffers.counters;
        let bytes = self.downloader.download(c, 0, 4)?;
        Ok(u64::from(u32::from_le_bytes([
            bytes[0], bytes[1], bytes[2], bytes[3],
        ])))
    }
}

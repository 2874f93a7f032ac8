//! Texture uploads through the staging ring: tightly packed host rows laid out at the
//! 256-byte row pitch that buffer-to-texture copies require.

use super::uploader::Uploader;
use crate::{Error, Result};

impl Uploader {
    /// Copies `data` into the region of `dst.texture` that starts at `dst.origin` (mip
    /// level `dst.mip_level`, aspect `dst.aspect`) and spans `size`. `data` is tightly
    /// packed: rows of `size.width` texels (of blocks, for compressed formats) with no
    /// padding, `size.height` rows per layer, `size.depth_or_array_layers` layers (array
    /// layers, or depth slices of a 3D texture), as an image decoder or a tile cache holds
    /// them. Buffer-to-texture copies need rows at a multiple of 256 bytes
    /// ([`wgpu::COPY_BYTES_PER_ROW_ALIGNMENT`]); this lays the rows out at that pitch in
    /// staging memory, so no padded copy of the image is made on the host. Regions larger
    /// than a staging buffer go through it in bands of whole rows.
    ///
    /// Like [`upload`](Self::upload) it returns once the copies are submitted: GPU work
    /// submitted afterwards sees the texels.
    ///
    /// Errors (nothing is copied): a texture without `COPY_DST`; a format or aspect that
    /// copies cannot fill (depth, multi-planar); a mip level or region outside the
    /// texture; an origin or size not on block boundaries; `data` of the wrong length; a
    /// single row larger than a staging buffer.
    ///
    /// ```no_run
    /// # let gpu = vramkit::Gpu::headless()?;
    /// let uploader = vramkit::stream::Uploader::new(&gpu, Default::default());
    /// let size = wgpu::Extent3d { width: 100, height: 60, depth_or_array_layers: 1 };
    /// let texture = gpu.device().create_texture(&wgpu::TextureDescriptor {
    ///     label: Some("tile"),
    ///     size,
    ///     mip_level_count: 1,
    ///     sample_count: 1,
    ///     dimension: wgpu::TextureDimension::D2,
    ///     format: wgpu::TextureFormat::Rgba8Unorm,
    ///     usage: wgpu::TextureUsages::COPY_DST | wgpu::TextureUsages::TEXTURE_BINDING,
    ///     view_formats: &[],
    /// });
    /// let texels = vec![255u8; 100 * 60 * 4]; // rows of 400 bytes, no padding
    /// uploader.upload_texture(texture.as_image_copy(), size, &texels)?;
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn upload_texture(
        &self,
        dst: wgpu::TexelCopyTextureInfo<'_>,
        size: wgpu::Extent3d,
        data: &[u8],
    ) -> Result<()> {
        let shape = TextureRegion::check(&dst, size, data.len() as u64, self.chunk_size())?;
        let TextureRegion {
            row_bytes,
            rows,
            layers,
            pitch,
            rows_per_chunk,
            block_height,
        } = shape;
        if row_bytes == 0 || rows == 0 || layers == 0 {
            return Ok(());
        }
        let layer_bytes = row_bytes * rows;
        for layer in 0..layers {
            let mut row0 = 0;
            while row0 < rows {
                let n = rows_per_chunk.min(rows - row0);
                let first = (layer * layer_bytes + row0 * row_bytes) as usize;
                let band = &data[first..first + (n * row_bytes) as usize];
                let (index, staging) = self.acquire_written(n * pitch, |writer| {
                    let (row, pitch) = (row_bytes as usize, pitch as usize);
                    writer.copy_rows(0, band, row, pitch, self.copy_threads());
                    Ok(())
                })?;
                let mut encoder =
                    self.gpu()
                        .device()
                        .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                            label: Some("vramkit texture upload"),
                        });
                encoder.copy_buffer_to_texture(
                    wgpu::TexelCopyBufferInfo {
                        buffer: staging.buffer(),
                        layout: wgpu::TexelCopyBufferLayout {
                            offset: 0,
                            bytes_per_row: Some(pitch as u32),
                            rows_per_image: Some(n as u32),
                        },
                    },
                    wgpu::TexelCopyTextureInfo {
                        texture: dst.texture,
                        mip_level: dst.mip_level,
                        origin: wgpu::Origin3d {
                            x: dst.origin.x,
                            y: dst.origin.y + (row0 as u32) * block_height,
                            z: dst.origin.z + layer as u32,
                        },
                        aspect: dst.aspect,
                    },
                    wgpu::Extent3d {
                        width: size.width,
                        height: n as u32 * block_height,
                        depth_or_array_layers: 1,
                    },
                );
                self.submit_staged(index, &staging, encoder)?;
                row0 += n;
            }
        }
        self.count_bytes(data.len() as u64);
        Ok(())
    }
}

impl Uploader {
    /// Uploads many regions of `texture` (each `(origin, size, texels)` like one
    /// [`upload_texture`](Self::upload_texture) into mip level 0 of a 2D texture), packed
    /// into as few staging buffers as fit and submitted once per buffer: what a tile cache
    /// needs, where 64 tiles a frame would otherwise cost 64 submits. Regions are checked
    /// as `upload_texture` checks them, all before anything is copied; one taller than a
    /// staging buffer goes through `upload_texture` on its own.
    ///
    /// ```no_run
    /// # let gpu = vramkit::Gpu::headless()?;
    /// let uploader = vramkit::stream::Uploader::new(&gpu, Default::default());
    /// let size = wgpu::Extent3d { width: 256, height: 128, depth_or_array_layers: 1 };
    /// let texture = gpu.device().create_texture(&wgpu::TextureDescriptor {
    ///     label: Some("cache"),
    ///     size,
    ///     mip_level_count: 1,
    ///     sample_count: 1,
    ///     dimension: wgpu::TextureDimension::D2,
    ///     format: wgpu::TextureFormat::Rgba8Unorm,
    ///     usage: wgpu::TextureUsages::COPY_DST | wgpu::TextureUsages::TEXTURE_BINDING,
    ///     view_formats: &[],
    /// });
    /// let tile = wgpu::Extent3d { width: 128, height: 128, depth_or_array_layers: 1 };
    /// let (a, b) = (vec![10u8; 128 * 128 * 4], vec![20u8; 128 * 128 * 4]);
    /// uploader.upload_texture_regions(&texture, &[
    ///     (wgpu::Origin3d { x: 0, y: 0, z: 0 }, tile, &a[..]),
    ///     (wgpu::Origin3d { x: 128, y: 0, z: 0 }, tile, &b[..]),
    /// ])?;
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn upload_texture_regions(
        &self,
        texture: &wgpu::Texture,
        regions: &[(wgpu::Origin3d, wgpu::Extent3d, &[u8])],
    ) -> Result<()> {
        let chunk = self.chunk_size();
        let mut shapes = Vec::with_capacity(regions.len());
        for &(origin, size, data) in regions {
            let dst = wgpu::TexelCopyTextureInfo {
                texture,
                mip_level: 0,
                origin,
                aspect: wgpu::TextureAspect::All,
            };
            let shape = TextureRegion::check(&dst, size, data.len() as u64, chunk)?;
            if shape.layers > 1 {
                return Err(Error::misuse(
                    crate::Misuse::Shape,
                    format!(
                        "a region of {} layers in a batched texture upload",
                        shape.layers
                    ),
                    "upload regions of several layers with upload_texture",
                ));
            }
            shapes.push(shape);
        }
        let mut k = 0;
        while k < regions.len() {
            if shapes[k].rows > shapes[k].rows_per_chunk {
                let (origin, size, data) = regions[k];
                let dst = wgpu::TexelCopyTextureInfo {
                    texture,
                    mip_level: 0,
                    origin,
                    aspect: wgpu::TextureAspect::All,
                };
                self.upload_texture(dst, size, data)?;
                k += 1;
                continue;
            }
            // The regions from k that fit one staging buffer, each at a 256-byte offset.
            let span = |s: &TextureRegion| (s.rows * s.pitch).next_multiple_of(256);
            let mut end = k;
            let mut bytes = 0;
            while end < regions.len()
                && shapes[end].rows <= shapes[end].rows_per_chunk
                && bytes + span(&shapes[end]) <= chunk
            {
                bytes += span(&shapes[end]);
                end += 1;
            }
            // Staging offsets; regions whose rows are already at the pitch (a 128-texel
            // RGBA8 tile) are copied in one parallel pass, the others row by row.
            let mut starts: Vec<usize> = Vec::with_capacity(end - k);
            let mut at = 0;
            for s in &shapes[k..end] {
                starts.push(at);
                at += span(s) as usize;
            }
            let tight = shapes[k..end].iter().all(|s| s.row_bytes == s.pitch);
            let (index, staging) = self.acquire_written(bytes, |w| {
                if tight {
                    let pieces: Vec<&[u8]> = regions[k..end].iter().map(|r| r.2).collect();
                    w.copy_pieces(&starts, &pieces);
                } else {
                    for (j, &start) in (k..end).zip(&starts) {
                        let s = &shapes[j];
                        w.copy_rows(
                            start,
                            regions[j].2,
                            s.row_bytes as usize,
                            s.pitch as usize,
                            1,
                        );
                    }
                }
                Ok(())
            })?;
            let mut encoder =
                self.gpu()
                    .device()
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                        label: Some("vramkit texture regions upload"),
                    });
            for (j, &start) in (k..end).zip(&starts) {
                let (origin, size, data) = regions[j];
                let s = &shapes[j];
                encoder.copy_buffer_to_texture(
                    wgpu::TexelCopyBufferInfo {
                        buffer: staging.buffer(),
                        layout: wgpu::TexelCopyBufferLayout {
                            offset: start as u64,
                            bytes_per_row: Some(s.pitch as u32),
                            rows_per_image: Some(s.rows as u32),
                        },
                    },
                    wgpu::TexelCopyTextureInfo {
                        texture,
                        mip_level: 0,
                        origin,
                        aspect: wgpu::TextureAspect::All,
                    },
                    size,
                );
                self.count_bytes(data.len() as u64);
            }
            self.submit_staged(index, &staging, encoder)?;
            k = end;
        }
        Ok(())
    }
}

impl Uploader {
    /// Uploads equal-sized tiles into mip level 0 of a 2D texture, merging tiles that
    /// follow each other in `tiles` and sit side by side in the texture (same `y`, each
    /// `x` one tile width after the previous) into one copy: wgpu costs several
    /// microseconds of CPU per copy command, so a tile cache filling neighbouring slots
    /// pays for runs, not tiles. Each tile's `data` is tightly packed rows. Tiles whose
    /// rows are not a multiple of 256 bytes go through
    /// [`upload_texture_regions`](Self::upload_texture_regions) one by one. Checked as
    /// `upload_texture` checks, all before anything is copied.
    ///
    /// ```no_run
    /// # let gpu = vramkit::Gpu::headless()?;
    /// let uploader = vramkit::stream::Uploader::new(&gpu, Default::default());
    /// let texture = gpu.device().create_texture(&wgpu::TextureDescriptor {
    ///     label: Some("cache"),
    ///     size: wgpu::Extent3d { width: 512, height: 128, depth_or_array_layers: 1 },
    ///     mip_level_count: 1,
    ///     sample_count: 1,
    ///     dimension: wgpu::TextureDimension::D2,
    ///     format: wgpu::TextureFormat::Rgba8Unorm,
    ///     usage: wgpu::TextureUsages::COPY_DST | wgpu::TextureUsages::TEXTURE_BINDING,
    ///     view_formats: &[],
    /// });
    /// let tile = wgpu::Extent3d { width: 128, height: 128, depth_or_array_layers: 1 };
    /// let bytes: Vec<Vec<u8>> = (0..4).map(|i| vec![i as u8 * 60; 128 * 128 * 4]).collect();
    /// let tiles: Vec<_> = (0..4u32)
    ///     .map(|i| (wgpu::Origin3d { x: i * 128, y: 0, z: 0 }, &bytes[i as usize][..]))
    ///     .collect();
    /// uploader.upload_texture_tiles(&texture, tile, &tiles)?; // one copy for all four
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn upload_texture_tiles(
        &self,
        texture: &wgpu::Texture,
        tile: wgpu::Extent3d,
        tiles: &[(wgpu::Origin3d, &[u8])],
    ) -> Result<()> {
        let Some(&(first, first_data)) = tiles.first() else {
            return Ok(());
        };
        let chunk = self.chunk_size();
        let dst = |origin| wgpu::TexelCopyTextureInfo {
            texture,
            mip_level: 0,
            origin,
            aspect: wgpu::TextureAspect::All,
        };
        let one = TextureRegion::check(&dst(first), tile, first_data.len() as u64, chunk)?;
        if one.row_bytes % 256 != 0 || one.layers != 1 || one.rows > one.rows_per_chunk {
            let regions: Vec<_> = tiles.iter().map(|&(o, d)| (o, tile, d)).collect();
            return self.upload_texture_regions(texture, &regions);
        }
        let tile_bytes = one.row_bytes * one.rows;
        // Runs of side-by-side tiles, each no wider than the texture or a staging buffer.
        let max_run = (chunk / tile_bytes).max(1) as usize;
        let mut runs: Vec<(wgpu::Origin3d, Vec<&[u8]>)> = Vec::new();
        for &(origin, data) in tiles {
            if data.len() as u64 != tile_bytes {
                TextureRegion::check(&dst(origin), tile, data.len() as u64, chunk)?;
            }
            match runs.last_mut() {
                Some((o, run))
                    if o.y == origin.y
                        && o.z == origin.z
                        && o.x + run.len() as u32 * tile.width == origin.x
                        && run.len() < max_run =>
                {
                    run.push(data)
                }
                _ => runs.push((origin, vec![data])),
            }
        }
        for (origin, run) in &runs {
            let size = wgpu::Extent3d {
                width: tile.width * run.len() as u32,
                ..tile
            };
            TextureRegion::check(&dst(*origin), size, tile_bytes * run.len() as u64, chunk)?;
        }
        let row = one.row_bytes as usize;
        let rows = one.rows as usize;
        let mut k = 0;
        while k < runs.len() {
            // The runs from k that fit one staging buffer.
            let mut end = k;
            let mut bytes = 0u64;
            while end < runs.len() && bytes + tile_bytes * runs[end].1.len() as u64 <= chunk {
                bytes += tile_bytes * runs[end].1.len() as u64;
                end += 1;
            }
            let mut layout = Vec::with_capacity(end - k);
            let mut at = 0usize;
            for (_, run) in &runs[k..end] {
                let pitch = row * run.len();
                layout.push((at, pitch, run.clone()));
                at += pitch * rows;
            }
            let (index, staging) = self.acquire_written(bytes, |w| {
                w.copy_tile_runs(&layout, row, rows);
                Ok(())
            })?;
            let mut encoder =
                self.gpu()
                    .device()
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                        label: Some("vramkit texture tiles upload"),
                    });
            for ((origin, run), (start, pitch, _)) in runs[k..end].iter().zip(&layout) {
                encoder.copy_buffer_to_texture(
                    wgpu::TexelCopyBufferInfo {
                        buffer: staging.buffer(),
                        layout: wgpu::TexelCopyBufferLayout {
                            offset: *start as u64,
                            bytes_per_row: Some(*pitch as u32),
                            rows_per_image: Some(rows as u32),
                        },
                    },
                    dst(*origin),
                    wgpu::Extent3d {
                        width: tile.width * run.len() as u32,
                        ..tile
                    },
                );
            }
            self.submit_staged(index, &staging, encoder)?;
            self.count_bytes(bytes);
            k = end;
        }
        Ok(())
    }
}

/// The staging layout of a texture upload, from checked arguments.
struct TextureRegion {
    /// Bytes per tightly packed row of blocks.
    row_bytes: u64,
    /// Rows of blocks per layer.
    rows: u64,
    layers: u64,
    /// Bytes per row in staging (a multiple of 256).
    pitch: u64,
    /// Rows that fit one staging buffer.
    rows_per_chunk: u64,
    /// Texel rows per block row (1 for uncompressed formats).
    block_height: u32,
}

impl TextureRegion {
    fn check(
        dst: &wgpu::TexelCopyTextureInfo<'_>,
        size: wgpu::Extent3d,
        data_len: u64,
        chunk: u64,
    ) -> Result<TextureRegion> {
        let texture = dst.texture;
        let format = texture.format();
        if !texture.usage().contains(wgpu::TextureUsages::COPY_DST) {
            return Err(Error::misuse(
                crate::Misuse::Usage,
                format!("a texture upload into a {format:?} texture without COPY_DST usage"),
                "create the texture with TextureUsages::COPY_DST",
            ));
        }
        let block_bytes = format.block_copy_size(Some(dst.aspect)).ok_or_else(|| {
            Error::misuse(
                crate::Misuse::Usage,
                format!(
                    "a texture upload into aspect {:?} of a {format:?} texture",
                    dst.aspect
                ),
                "depth and multi-planar formats take no buffer copies as a whole: \
                 name a single aspect that copies accept (stencil, one plane)",
            )
        })?;
        if dst.mip_level >= texture.mip_level_count() {
            return Err(Error::misuse(
                crate::Misuse::Length,
                format!(
                    "a texture upload into mip level {} of a texture with {} levels",
                    dst.mip_level,
                    texture.mip_level_count()
                ),
                "use a mip level below the texture's mip_level_count",
            ));
        }
        let level = texture
            .size()
            .mip_level_size(dst.mip_level, texture.dimension())
            .physical_size(format);
        let o = dst.origin;
        let fits = |origin: u32, len: u32, limit: u32| {
            origin.checked_add(len).is_some_and(|end| end <= limit)
        };
        if !fits(o.x, size.width, level.width)
            || !fits(o.y, size.height, level.height)
            || !fits(o.z, size.depth_or_array_layers, level.depth_or_array_layers)
        {
            return Err(Error::misuse(
                crate::Misuse::Length,
                format!(
                    "a texture upload of {}x{}x{} texels at ({}, {}, {}) into mip level {} of \
                     {}x{}x{}",
                    size.width,
                    size.height,
                    size.depth_or_array_layers,
                    o.x,
                    o.y,
                    o.z,
                    dst.mip_level,
                    level.width,
                    level.height,
                    level.depth_or_array_layers
                ),
                "keep origin + size within the mip level (layers count in the third axis)",
            ));
        }
        let (bw, bh) = format.block_dimensions();
        if !o.x.is_multiple_of(bw)
            || !o.y.is_multiple_of(bh)
            || !size.width.is_multiple_of(bw)
            || !size.height.is_multiple_of(bh)
        {
            return Err(Error::misuse(
                crate::Misuse::Alignment,
                format!(
                    "a texture upload of {}x{} texels at ({}, {}) into {format:?}, whose blocks \
                     are {bw}x{bh}",
                    size.width, size.height, o.x, o.y
                ),
                "put origin and size on block boundaries (regions at a level's edge use \
                 the physical size, rounded up to whole blocks)",
            ));
        }
        let row_bytes = u64::from(size.width / bw) * u64::from(block_bytes);
        let rows = u64::from(size.height / bh);
        let layers = u64::from(size.depth_or_array_layers);
        let expected = row_bytes * rows * layers;
        if data_len != expected {
            return Err(Error::misuse(
                crate::Misuse::Length,
                format!(
                    "a texture upload of {data_len} bytes for a region of {expected} bytes \
                     ({rows} rows of {row_bytes} bytes, {layers} layers)"
                ),
                "pass tightly packed rows with no padding: the uploader adds the 256-byte \
                 row pitch itself",
            ));
        }
        let pitch = row_bytes.next_multiple_of(u64::from(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT));
        let rows_per_chunk = chunk / pitch.max(1);
        if rows_per_chunk == 0 && expected > 0 {
            return Err(Error::misuse(
                crate::Misuse::Length,
                format!(
                    "a texture upload whose rows take {pitch} bytes in staging, more than a \
                     staging buffer of {chunk}"
                ),
                "raise UploaderConfig::chunk_size above one padded row",
            ));
        }
        Ok(TextureRegion {
            row_bytes,
            rows,
            layers,
            pitch,
            rows_per_chunk,
            block_height: bh,
        })
    }
}

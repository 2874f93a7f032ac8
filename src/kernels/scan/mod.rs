//! Prefix sums (`shaders/scan/scan.wgsl`): inclusive and exclusive, u32 (wrapping) and f32, any
//! length, in one pass over memory (decoupled look-back; see the shader for how it works
//! and what it assumes of the GPU).

pub(crate) mod shaders;

use super::params::kernel_params;
use super::{check_count, check_no_overlap, grid, next_epoch, Batch, Bindings, Bound};
use crate::arena::Allocation;
use crate::{Error, Gpu, Result};

kernel_params! {
    /// `Params` of `scan.wgsl`: `n` elements in `tiles` tiles, exclusive (1) or inclusive
    /// (0), and the call's epoch.
    pub(crate) struct ScanParams {
        n: u32,
        tiles: u32,
        exclusive: u32,
        epoch: u32,
        _pad1: u32,
        _pad2: u32,
        _pad3: u32,
        _pad4: u32,
    }
}

/// Elements one workgroup scans (`WG * PER` in shaders/shared/scan_workgroup.wgsl).
const TILE: u64 = 8192;
/// Elements of one tile of the compact portable scan (`shaders::SCAN_*_COMPACT`, PER 8).
const TILE_COMPACT: u64 = 2048;
/// Workgroup memory of the portable scan with tiles of [`TILE`]: the tile and its padding,
/// the invocation sums, the look-back's three arrays and the tile id (`scan_workgroup.wgsl`,
/// `scan.wgsl`), each variable rounded up to 16 bytes as Chromium's Tint counts them
/// (37 904 bytes; naga counts 37 892). Devices that give less run the compact variant.
const PORTABLE_WORKGROUP_BYTES: u32 = ((TILE + TILE / 32 + 4 * 256) * 4 + 16) as u32;
/// Elements of one tile with subgroup operations, one element per invocation and row
/// (`WG * PER` in shaders/shared/scan_subgroup.wgsl, PER 8 in `shaders::SCAN_*_SUBGROUP`).
const TILE_SUBGROUP: u64 = 2048;
/// Elements of one tile with subgroup operations, four elements per invocation and row
/// (`WG * PER * LANE`, PER 4 in `shaders::SCAN_*_VEC4`). Why 4: one element per row issues
/// four times the loads and subgroup scans, and PER 8 holds two tiles in registers, which
/// spill; 4 read fastest of 1, 2, 3, 4 and 8 (BENCHMARKS.md, Kernels).
const TILE_VEC4: u64 = 4096;
/// Tiles one workgroup scans in turn with subgroup operations (`CLAIMS` there): 8 read
/// fastest of 2, 4, 8 and 16.
const CLAIMS_SUBGROUP: u64 = 8;

/// Words of the scan state before the tiles' slots: the claim and done counters
/// (`SPLIT_BASE` in shaders/scan/scan.wgsl).
const STATE_WORDS_BEFORE_SLOTS: u64 = 2;

/// Epochs a scan state runs through before it is zeroed again: 14 bits of each published
/// word (shaders/scan/scan.wgsl).
const EPOCHS: u32 = 16383;

/// The scans' state (the counters, then two words per tile; see shaders/scan/scan.wgsl), kept
/// by the kernels and shared by every scan: each call leaves its counters at zero, and
/// its epoch tells its published values from earlier calls', so a call needs no zeroing
/// dispatch before it. Outside the arena: it grows to the largest scan's tiles (8 bytes
/// per 2048 elements with subgroups, 8192 without).
#[derive(Default)]
pub(super) struct ScanState {
    buffer: Option<wgpu::Buffer>,
    /// The last epoch handed out, 0 before the first.
    epoch: u32,
}

impl ScanState {
    /// The state for a call that needs `words` words, the call's epoch, and whether the
    /// call must zero the state first: when the epochs start over, an earlier value could
    /// otherwise carry the new call's epoch. A new (larger) buffer is zeroed by wgpu.
    fn take(&mut self, gpu: &Gpu, words: u64) -> Result<(Bound, u32, bool)> {
        self.epoch = next_epoch(self.epoch, EPOCHS);
        let mut clear = self.epoch == 1;
        let size = words * 4;
        let buffer = match &self.buffer {
            Some(b) if b.size() >= size => b.clone(),
            _ => {
                // Doubling, so a growing series of scans creates few buffers.
                let grown = size
                    .next_power_of_two()
                    .max(self.buffer.as_ref().map_or(0, |b| 2 * b.size()))
                    .max(4096);
                let grown = if grown > gpu.limits().max_storage_buffer_binding_size {
                    size
                } else {
                    grown
                };
                let b = gpu.scoped("creating the scans' state", || {
                    gpu.device().create_buffer(&wgpu::BufferDescriptor {
                        label: Some("vramkit scan state"),
                        size: grown,
                        usage: wgpu::BufferUsages::STORAGE,
                        mapped_at_creation: false,
                    })
                })?;
                self.buffer = Some(b.clone());
                clear = false;
                b
            }
        };
        let size = buffer.size();
        Ok((
            Bound {
                buffer,
                offset: 0,
                size,
            },
            self.epoch,
            clear,
        ))
    }
}

/// Inclusive (`y[i] = x[0] + ... + x[i]`) or exclusive (`y[i] = x[0] + ... + x[i-1]`,
/// `y[0] = 0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanKind {
    /// Includes the element itself.
    Inclusive,
    /// Sums the elements before it.
    Exclusive,
}

/// Element type of a scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanType {
    /// `u32`, wrapping on overflow.
    U32,
    /// `f32`.
    F32,
}

impl<'a> Batch<'a> {
    /// Prefix sum of `n` elements of `x` into `y` (see [`scan`](Self::scan)).
    pub(crate) fn scan_n(
        &mut self,
        ty: ScanType,
        kind: ScanKind,
        n: u64,
        x: &'a Allocation,
        y: &'a Allocation,
    ) -> Result<&mut Self> {
        self.record_scan(ty, kind, n, x, y, true)
    }

    /// [`scan`](Self::scan); `allow_words: false` keeps the subgroup variant to one element
    /// per invocation and row, as where the buffers end inside the last word (tested below).
    fn record_scan(
        &mut self,
        ty: ScanType,
        kind: ScanKind,
        n: u64,
        x: &'a Allocation,
        y: &'a Allocation,
        allow_words: bool,
    ) -> Result<&mut Self> {
        check_count(n, "scan")?;
        if n == 0 {
            return Err(Error::misuse(
                crate::Misuse::Shape,
                "a scan of 0 elements",
                "pass at least one element",
            ));
        }
        self.check_len(x, n, 4, "x")?;
        self.check_len(y, n, 4, "y")?;
        check_no_overlap(x, y, false, "scan")?;
        let subgroups = self.kernels.subgroups;
        // Whole 16-byte words where the buffers hold the bytes up to the next word. Arena
        // ranges are reserved in multiples of the storage offset alignment (32 bytes or
        // more under wgpu), so they do.
        let words = (subgroups && allow_words)
            .then(|| Bound::of(x).widened(n).zip(Bound::of(y).widened(n)))
            .flatten();
        let compact = !subgroups
            && self.gpu().limits().max_compute_workgroup_storage_size < PORTABLE_WORKGROUP_BYTES;
        // Elements per tile, tiles per workgroup.
        let (tile, claims) = if words.is_some() {
            (TILE_VEC4, CLAIMS_SUBGROUP)
        } else if subgroups {
            (TILE_SUBGROUP, CLAIMS_SUBGROUP)
        } else if compact {
            (TILE_COMPACT, 1)
        } else {
            (TILE, 1)
        };
        let tiles = n.div_ceil(tile);
        let (state, epoch, clear) = self
            .kernels
            .shared
            .scan_state
            .lock()
            .take(self.gpu(), STATE_WORDS_BEFORE_SLOTS + 2 * tiles)?;
        if clear {
            self.elementwise_bound(
                state.size / 4,
                "fill",
                0,
                [0.0; 3],
                Bindings::three(self.spare(0), state.clone(), self.spare(1)),
            )?;
        }
        let shader = match (ty, subgroups) {
            (ScanType::U32, _) if words.is_some() => &shaders::SCAN_U32_VEC4,
            (ScanType::F32, _) if words.is_some() => &shaders::SCAN_F32_VEC4,
            (ScanType::U32, false) if compact => &shaders::SCAN_U32_COMPACT,
            (ScanType::F32, false) if compact => &shaders::SCAN_F32_COMPACT,
            (ScanType::U32, false) => &shaders::SCAN_U32,
            (ScanType::F32, false) => &shaders::SCAN_F32,
            (ScanType::U32, true) => &shaders::SCAN_U32_SUBGROUP,
            (ScanType::F32, true) => &shaders::SCAN_F32_SUBGROUP,
        };
        let params = ScanParams {
            n: n as u32,
            tiles: tiles as u32,
            exclusive: u32::from(kind == ScanKind::Exclusive),
            epoch,
            ..Default::default()
        };
        let io = match words {
            Some((xw, yw)) => Bindings::three(xw, yw, state),
            None => Bindings::three(Bound::of(x), Bound::of(y), state),
        };
        let groups = grid(tiles, claims, self.gpu());
        self.record(shader, "scan", params.into(), io, groups)?;
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::Kernels;
    use crate::{Arena, Gpu};
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// Scans `n` elements of `x` into `y` with the one-element subgroup variant and reads
    /// `y` back.
    fn scan_one_element_rows<T: bytemuck::Pod>(
        kernels: &Kernels,
        ty: ScanType,
        kind: ScanKind,
        n: u64,
        x: &Allocation,
        y: &Allocation,
    ) -> Vec<T> {
        let mut batch = kernels.batch();
        batch.record_scan(ty, kind, n, x, y, false).unwrap();
        batch.submit().unwrap();
        crate::readback::read_as(kernels.arena().gpu(), y.buffer(), y.offset(), n as usize).unwrap()
    }

    /// The subgroup scan with one element per invocation and row, which serves where the
    /// buffers cannot be bound as whole words (the arena's own ranges always can, so the
    /// integration tests run the word variant), against the CPU at sizes that end inside
    /// a tile, inside a workgroup's claims, and one element into a word.
    #[test]
    fn one_element_rows_match_the_cpu() {
        let gpu = Gpu::headless().unwrap_or_else(|e| panic!("{e}"));
        let arena = Arena::new(&gpu, Default::default()).unwrap();
        let kernels = Kernels::new(&arena).unwrap();
        let mut rng = SmallRng::seed_from_u64(0x9e37_79b9_7f4a_7c15);
        for n in [1u64, 5, 2049, 16385, (1 << 18) + 7] {
            let x: Vec<u32> = (0..n).map(|_| rng.gen()).collect();
            // The same values as f32 in [0, 1): the f64 prefix bounds the error.
            let xf: Vec<f32> = x
                .iter()
                .map(|&v| (v >> 8) as f32 / (1u32 << 24) as f32)
                .collect();
            let xa = arena.alloc(4 * n, "x").unwrap();
            let xfa = arena.alloc(4 * n, "x f32").unwrap();
            let ya = arena.alloc(4 * n, "y").unwrap();
            gpu.queue()
                .write_buffer(xa.buffer(), xa.offset(), bytemuck::cast_slice(&x));
            gpu.queue()
                .write_buffer(xfa.buffer(), xfa.offset(), bytemuck::cast_slice(&xf));
            for kind in [ScanKind::Inclusive, ScanKind::Exclusive] {
                let inclusive = kind == ScanKind::Inclusive;
                let got: Vec<u32> =
                    scan_one_element_rows(&kernels, ScanType::U32, kind, n, &xa, &ya);
                let mut acc = 0u32;
                for (i, (&g, &v)) in got.iter().zip(&x).enumerate() {
                    let before = acc;
                    acc = acc.wrapping_add(v);
                    let want = if inclusive { acc } else { before };
                    assert_eq!(g, want, "{kind:?} n={n}: element {i}");
                }
                let got: Vec<f32> =
                    scan_one_element_rows(&kernels, ScanType::F32, kind, n, &xfa, &ya);
                let mut acc = 0f64;
                for (i, (&g, &v)) in got.iter().zip(&xf).enumerate() {
                    let before = acc;
                    acc += f64::from(v);
                    let want = if inclusive { acc } else { before };
                    let err = (f64::from(g) - want).abs() / want.max(1.0);
                    assert!(
                        err < 1e-4,
                        "f32 {kind:?} n={n}: element {i} is {g}, want {want}"
                    );
                }
            }
        }
    }
}

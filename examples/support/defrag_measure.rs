//! A defragmentation timed on the GPU, and the device copy it is compared with; shared by
//! `bench tier` and `examples/oversubscribe.rs`.

use std::time::Instant;

use vramkit::arena::HistoryConfig;
use vramkit::tier::{DefragLimits, DefragReport, Tiers};
use vramkit::Runtime;

/// Runs `tiers.defragment()` with GPU profiling on: its report and the nanoseconds its
/// copies took on the GPU (timestamp queries around its submission).
pub fn timed_defragment(rt: &Runtime, tiers: &Tiers) -> vramkit::Result<(DefragReport, u64)> {
    rt.arena().record_history(Some(HistoryConfig::default()));
    rt.gpu().set_profiling(true)?;
    let report = tiers.defragment(DefragLimits::default());
    rt.gpu().collect_profile(true)?;
    rt.gpu().set_profiling(false)?;
    let gpu_ns = defragment_spans(rt).iter().sum();
    rt.arena().record_history(None);
    Ok((report?, gpu_ns))
}

/// The GPU nanoseconds of each `defragment` submission the memory history has recorded
/// (profiling on; one per pass).
pub fn defragment_spans(rt: &Runtime) -> Vec<u64> {
    rt.arena()
        .history()
        .map(|h| {
            h.gpu_spans
                .iter()
                .filter(|s| s.name == "defragment")
                .map(|s| s.dur_ns)
                .collect()
        })
        .unwrap_or_default()
}

/// Seconds of the fastest of five single copy commands of `bytes` (rounded down to 4, at
/// least 1 MiB) between two fresh allocations, each timed from its submit to an idle GPU.
pub fn device_copy_secs(rt: &Runtime, bytes: u64) -> vramkit::Result<(u64, f64)> {
    let bytes = bytes.max(1 << 20) & !3;
    let (a, b) = (
        rt.arena().alloc(bytes, "copy peer")?,
        rt.arena().alloc(bytes, "copy peer")?,
    );
    let gpu = rt.gpu();
    let mut best = f64::MAX;
    for _ in 0..5 {
        let mut enc = gpu.device().create_command_encoder(&Default::default());
        enc.copy_buffer_to_buffer(a.buffer(), a.offset(), b.buffer(), b.offset(), bytes);
        let t = Instant::now();
        gpu.submit([enc.finish()]);
        gpu.wait_idle()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok((bytes, best))
}

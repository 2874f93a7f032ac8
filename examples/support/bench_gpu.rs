//! GPU suites of the runnable benchmark.
use super::Figures;
use vramkit::Gpu;

pub fn suite_arena(_gpu: &Gpu, _figures: &mut Figures) {}
pub fn suite_kernels(_gpu: &Gpu, _figures: &mut Figures) {}

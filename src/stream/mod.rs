//! Streaming data between host and GPU memory.
//!
//! [`Uploader`] moves host bytes into arena allocations through a ring of mapped staging
//! buffers: large transfers are cut into chunks, so filling chunk `k + 1` on the CPU
//! overlaps the GPU's copy of chunk `k`; staging memory is bounded (a full ring waits for
//! the GPU instead of growing); and after warm-up no buffer is created.

mod uploader;

pub use uploader::{Uploader, UploaderConfig, UploaderStats};

//! Streaming data between host and GPU memory.
//!
//! [`Uploader`] moves host bytes into arena allocations through a ring of mapped staging
//! buffers: large transfers are cut into chunks, so filling chunk `k + 1` on the CPU
//! overlaps the GPU's copy of chunk `k`; staging memory is bounded (a full ring waits for
//! the GPU instead of growing); and after warm-up no buffer is created.
//!
//! [`Downloader`] is the reverse: a ring of `MAP_READ` staging buffers with several chunk
//! copies in flight while the current chunk is copied out of mapped memory.

mod downloader;
mod uploader;

pub use downloader::{Downloader, DownloaderConfig};
pub use uploader::{Uploader, UploaderConfig, UploaderStats};

//! Where a defragmentation's given-back blocks are destroyed: a thread of its own, so that
//! the frame thread never waits for the driver to free a block (4 ms for a 256 MiB block
//! on an H200 with driver 580). Its driver calls still wait while one is freed.
//!
//! # Promises
//! - The arena counts a block as given back when it hands it over; the device memory
//!   goes back when the thread has destroyed it, a moment later.
//! - Dropping the [`Disposer`] does not wait: the thread destroys what is queued and
//!   ends (a `Defragmentation` that ends gives back dozens of blocks at once, a quarter
//!   of a second of the driver's time, which `end` should not spend on the frame thread).
//!   It is not joined for the same reason as the mip reaper: its last block may be
//!   handed over from a callback.
//! - Where no thread can be started (the browser), blocks are destroyed at once, on the
//!   caller's thread, as before.

use std::sync::mpsc;

use crate::arena::DoomedBlock;

/// A thread destroying given-back blocks, started at the first hand-over.
#[derive(Default)]
pub(super) struct Disposer {
    /// The thread's channel; dropping it (with the `Disposer`) ends the thread once it has
    /// destroyed what is queued. The thread is never joined (module docs).
    thread: Option<mpsc::Sender<Vec<DoomedBlock>>>,
    /// The thread could not be started: destroy on the caller's thread.
    inline: bool,
}

impl Disposer {
    /// Destroys `blocks` on the disposer's thread (or here, where there is none).
    pub fn dispose(&mut self, blocks: Vec<DoomedBlock>) {
        if blocks.is_empty() {
            return;
        }
        if self.thread.is_none() && !self.inline {
            self.start();
        }
        match &self.thread {
            Some(to) => {
                if let Err(mpsc::SendError(blocks)) = to.send(blocks) {
                    // The thread is gone (it cannot panic, but be sure): here, then.
                    blocks.into_iter().for_each(DoomedBlock::destroy);
                }
            }
            None => blocks.into_iter().for_each(DoomedBlock::destroy),
        }
    }

    fn start(&mut self) {
        if cfg!(target_arch = "wasm32") {
            self.inline = true;
            return;
        }
        let (to, from) = mpsc::channel::<Vec<DoomedBlock>>();
        let spawned = std::thread::Builder::new()
            .name("vramkit-defrag-release".into())
            .spawn(move || {
                for blocks in from {
                    blocks.into_iter().for_each(DoomedBlock::destroy);
                }
            });
        match spawned {
            // Detached: see `thread`.
            Ok(_) => self.thread = Some(to),
            Err(e) => {
                log::debug!(
                    "vramkit: no defragmentation release thread ({e}); blocks are destroyed inline"
                );
                self.inline = true;
            }
        }
    }
}

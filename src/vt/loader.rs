//! Worker threads that read (and decode) tiles from the source, most wanted first:
//! straight into tile staging (waiting for a slot when all are taken), or into ordinary
//! memory where the device has no tile staging.
//!
//! Without threads (in the browser, where a page has one, or with `loader_threads: 0`)
//! the frame's own thread reads the queued tiles when it collects results, into ordinary
//! memory (a staging slot could not be waited for): same order, same results, the reading
//! time counted in the frame's CPU time.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use parking_lot::Condvar;

use crate::sync::rank::{self as lock_rank, Mutex};

use super::layout::TileId;
use super::source::{read_checked, TileSource};
use super::staging::{StagedTile, TileStaging};
use crate::{Error, Result};

/// Where a worker put a tile's bytes.
pub(crate) enum TileBytes {
    /// In a tile-staging slot, ready for the GPU to copy.
    Staged(StagedTile),
    /// In ordinary memory (no staging slot was free, or there is no tile staging).
    Heap(Vec<u8>),
}

/// A tile read by a worker: its bytes or why not.
pub(crate) type Loaded = (TileId, Result<TileBytes>);

struct Shared {
    queue: Mutex<VecDeque<TileId>>,
    wake: Condvar,
    stop: AtomicBool,
}

/// The worker pool. Each frame the queue is taken back and refilled in the new order of
/// priority, so a tile the camera left behind is not read.
pub(crate) struct Loader {
    shared: Arc<Shared>,
    results: mpsc::Receiver<Loaded>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// The source and tile size, where the frame's thread reads the tiles itself.
    inline: Option<(Arc<dyn TileSource>, usize)>,
}

impl Loader {
    /// Workers reading tiles of `tile_bytes` bytes from `source`, into `staging` while it
    /// has free slots.
    pub fn new(
        source: Arc<dyn TileSource>,
        threads: usize,
        tile_bytes: usize,
        staging: Option<Arc<TileStaging>>,
    ) -> Result<Loader> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(lock_rank::VT_LOAD_QUEUE, VecDeque::new()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let (tx, results) = mpsc::channel();
        // No threads: the browser's case too (the caller passes 0 there, `resources.rs`).
        if threads == 0 {
            return Ok(Loader {
                shared,
                results,
                threads: Vec::new(),
                inline: Some((source, tile_bytes)),
            });
        }
        let mut handles = Vec::new();
        for i in 0..threads {
            let (shared, source, tx) = (shared.clone(), source.clone(), tx.clone());
            let staging = staging.clone();
            let handle = std::thread::Builder::new()
                .name(format!("vramkit-vt-load-{i}"))
                .spawn(move || loop {
                    let tile = {
                        let mut q = shared.queue.lock();
                        loop {
                            if shared.stop.load(Ordering::Acquire) {
                                return;
                            }
                            if let Some(t) = q.pop_front() {
                                break t;
                            }
                            shared.wake.wait(&mut q.guard);
                        }
                    };
                    let bytes = match &staging {
                        Some(pool) => match pool.take_waiting(&shared.stop) {
                            Some(mut slot) => source
                                .read_tile_into(tile, slot.bytes_mut())
                                .map(|()| TileBytes::Staged(slot)),
                            None => return, // stopping
                        },
                        // No tile staging on this device: ordinary memory.
                        None => {
                            read_checked(source.as_ref(), tile, tile_bytes).map(TileBytes::Heap)
                        }
                    };
                    if tx.send((tile, bytes)).is_err() {
                        return;
                    }
                })
                .map_err(|e| Error::Io {
                    during: "starting a virtual-texture loader thread".into(),
                    source: e,
                })?;
            handles.push(handle);
        }
        Ok(Loader {
            shared,
            results,
            threads: handles,
            inline: None,
        })
    }

    /// Empties the queue and returns the jobs no worker had taken. Taken under the
    /// queue's lock, so every tile is either returned here or being read by a worker:
    /// none is read twice or lost.
    pub fn take_queued(&self) -> Vec<TileId> {
        self.shared.queue.lock().drain(..).collect()
    }

    /// Queues `tiles` (most wanted first) behind what is queued.
    pub fn push(&self, tiles: Vec<TileId>) {
        if tiles.is_empty() {
            return;
        }
        self.shared.queue.lock().extend(tiles);
        self.shared.wake.notify_all();
    }

    /// Results that have arrived, without waiting; without threads, every queued tile,
    /// read now.
    pub fn finished(&self) -> Vec<Loaded> {
        match &self.inline {
            Some(_) => std::iter::from_fn(|| self.read_next_inline()).collect(),
            None => self.results.try_iter().collect(),
        }
    }

    /// Waits for the next result; without threads, reads the next queued tile now.
    pub fn next(&self) -> Option<Loaded> {
        match &self.inline {
            Some(_) => self.read_next_inline(),
            None => self.results.recv().ok(),
        }
    }

    /// Reads the most wanted queued tile on this thread (no threads: module docs).
    fn read_next_inline(&self) -> Option<Loaded> {
        let (source, tile_bytes) = self.inline.as_ref()?;
        let tile = self.shared.queue.lock().pop_front()?;
        let bytes = read_checked(source.as_ref(), tile, *tile_bytes).map(TileBytes::Heap);
        Some((tile, bytes))
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        // Set under the queue's lock: a worker checks `stop` and goes to sleep under that
        // lock, so it either sees the flag or is already asleep when the notification
        // comes. Set without it, the notification could fall between a worker's check and
        // its wait, and the join below waited forever (a CI run hung in `tests/it/vt.rs`).
        {
            let _queue = self.shared.queue.lock();
            self.shared.stop.store(true, Ordering::Release);
        }
        self.shared.wake.notify_all();
        // The last handle of a virtual texture may drop inside a tile source a worker
        // runs: that worker is detached (it sees the flag and ends), never joined by
        // itself.
        let me = std::thread::current().id();
        for t in self.threads.drain(..) {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
    }
}

//! When submitted GPU work is done: one tracker per device, which every part of vramkit
//! asks (the arena's frees, the tiers' in-flight marks, the planned loop's fences, the
//! staging rings, the virtual textures' held resources, asynchronous uploads).
//!
//! # How it works
//! An *epoch* is a number handed out by [`Gpu::work_epoch`]: it completes once the GPU
//! has finished all work submitted (and all writes queued with `Queue::write_buffer`)
//! before it was handed out. Each epoch files one `Queue::on_submitted_work_done`
//! callback, which raises the tracker's *done* mark to it. Epochs are handed out and
//! their callbacks filed under one lock ([`lock_rank::WORK_DONE`]), so they are filed in
//! epoch order and complete in that order: wgpu runs work-done callbacks in submission
//! order, and a callback filed later is attached to the same submission or a later one.
//! So "epoch `e` is done" is one atomic load and a comparison ([`WorkDone::is_done`]).
//!
//! The tracker also owns what wgpu-core 30 makes everyone work around:
//! - **A callback filed while nothing is in flight waits for the next submission.**
//!   A blocking wait ([`Gpu::wait_epoch`]) and a flush ([`Gpu::flush_epoch`]) first
//!   submit an empty command list, so that such an epoch completes without the program
//!   submitting anything.
//! - **A callback runs on whichever thread polls, after that poll has released wgpu's
//!   locks**: after a blocking wait for all work ([`Gpu::wait_idle`]) another thread may
//!   hold the callback, not yet run. The wait itself proves every epoch filed before it
//!   done, so it raises the mark to the newest filed epoch; nobody waits for a callback
//!   after a wait that covered its work.
//!
//! Epoch 0 is done from the start: a dry run, which records no GPU work, uses it.
//!
//! # Waiting
//! - [`WorkDone::is_done`] never blocks: what a browser's event loop, or an allocation's
//!   fast path, asks.
//! - [`Gpu::epoch_done`] is a future, woken by the epoch's callback. It polls nothing
//!   itself: something must drive the device (a blocking wait, [`Gpu::poll`], the polling
//!   thread of the stream's asynchronous calls, or a browser's event loop).
//! - [`Gpu::wait_epoch`] blocks (native only): it polls until the epoch's callback has
//!   run, yielding first and sleeping later, and after [`IDLE_AFTER`] waits for all work.
//!
//! # What it promises
//! - An epoch reported done covers every submission and queued write made before
//!   [`Gpu::work_epoch`] returned it.
//! - The done mark never goes down, and never passes the newest epoch handed out.
//! - A callback given to [`Gpu::work_epoch_then`] runs once, after its epoch is marked
//!   done, inside whatever polls the device; on a lost device it never runs and is
//!   dropped: recording a loss wakes every future waiting for an epoch and drops every
//!   callback waiting ([`WorkDone::abandon_all`]), and the futures resolve with the loss.
//! - **wgpu holds nothing of vramkit's.** The closure filed with `on_submitted_work_done`
//!   holds only a weak handle of the tracker and its epoch; the callbacks of
//!   [`Gpu::work_epoch_then`] wait here. On a real loss wgpu keeps its pending closures
//!   unrun inside the device for as long as the device lives, so a closure holding the
//!   queue (or a buffer, through a callback's captures) kept the lost device alive for
//!   ever: one leaked device per recovery, until NVIDIA refused the 124th (issue 61).
//! - No lock of the tracker's is held while wgpu runs a callback: the epoch lock is held
//!   only around filing (`on_submitted_work_done` flushes queued writes and files the
//!   closure; it runs none), the wakers' lock only to take or wake wakers.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use super::Gpu;
use crate::sync::rank::{self as lock_rank, Mutex};
use crate::Result;

/// A point in the device's submitted work (see the module docs); 0 is always done.
pub(crate) type Epoch = u64;

/// How long a blocking wait polls for an epoch's callback before it waits for all work.
pub(crate) const IDLE_AFTER: Duration = Duration::from_millis(200);

/// The tracker of one device; a cheap handle (clones share it), so hot paths keep one
/// and read the done mark in one load.
#[derive(Clone)]
pub(crate) struct WorkDone {
    inner: Arc<Inner>,
}

struct Inner {
    queue: wgpu::Queue,
    /// The newest epoch known done.
    done: AtomicU64,
    /// The newest epoch whose callback is filed; every older one is filed too.
    filed: AtomicU64,
    /// The last epoch handed out, under which the next is handed out and filed.
    issue: Mutex<Epoch>,
    /// Futures waiting for an epoch; checked only while `waiting` is set.
    wakers: Mutex<Vec<(Epoch, Waker)>>,
    /// Callbacks of [`WorkDone::issue_then`] waiting for their epochs, in epoch order.
    thens: Mutex<Vec<(Epoch, Then)>>,
    waiting: AtomicBool,
    /// The newest epoch whose callback wgpu dropped without running it (a lost device):
    /// a future waiting for it fails instead of waiting forever.
    abandoned: AtomicU64,
}

/// A callback to run once its epoch is done.
type Then = Box<dyn FnOnce() + Send>;

/// What an epoch's closure in wgpu owns: a weak handle (module docs). If wgpu drops the
/// closure unrun, the epoch is abandoned, its waiters woken and its callbacks dropped.
struct Filed {
    inner: std::sync::Weak<Inner>,
    epoch: Epoch,
    ran: bool,
}

impl Drop for Filed {
    fn drop(&mut self) {
        if self.ran {
            return;
        }
        if let Some(inner) = self.inner.upgrade() {
            inner.abandoned.fetch_max(self.epoch, Ordering::AcqRel);
            inner.wake(inner.done.load(Ordering::Acquire), true);
            drop(inner.take_thens(self.epoch));
        }
    }
}

impl WorkDone {
    pub(super) fn new(queue: wgpu::Queue) -> WorkDone {
        WorkDone {
            inner: Arc::new(Inner {
                queue,
                done: AtomicU64::new(0),
                filed: AtomicU64::new(0),
                issue: Mutex::new(lock_rank::WORK_DONE, 0),
                wakers: Mutex::new(lock_rank::EPOCH_WAKERS, Vec::new()),
                thens: Mutex::new(lock_rank::EPOCH_THENS, Vec::new()),
                waiting: AtomicBool::new(false),
                abandoned: AtomicU64::new(0),
            }),
        }
    }

    /// The newest epoch known done.
    #[inline(always)]
    pub fn done(&self) -> Epoch {
        self.inner.done.load(Ordering::Acquire)
    }

    /// Whether `epoch` is done (never blocks, never polls).
    #[inline(always)]
    pub fn is_done(&self, epoch: Epoch) -> bool {
        epoch <= self.done()
    }

    /// The newest epoch handed out whose callback is filed.
    pub fn filed(&self) -> Epoch {
        self.inner.filed.load(Ordering::Acquire)
    }

    /// Hands out the next epoch and files its callback, which marks it done and then runs
    /// `then`.
    pub fn issue_then(&self, then: impl FnOnce() + Send + 'static) -> Epoch {
        self.file(Some(Box::new(then)))
    }

    fn file(&self, then: Option<Then>) -> Epoch {
        let mut last = self.inner.issue.lock();
        *last += 1;
        let epoch = *last;
        // Before the closure is filed, so that it finds the callback when it runs.
        if let Some(then) = then {
            self.inner.thens.lock().push((epoch, then));
        }
        let mut filed = Filed {
            inner: Arc::downgrade(&self.inner),
            epoch,
            ran: false,
        };
        self.inner.queue.on_submitted_work_done(move || {
            filed.ran = true;
            if let Some(inner) = filed.inner.upgrade() {
                inner.complete(epoch);
                // Outside every lock of the tracker's, in epoch order.
                for (_, then) in inner.take_thens(epoch) {
                    then();
                }
            }
        });
        self.inner.filed.store(epoch, Ordering::Release);
        epoch
    }

    /// The epoch the next [`issue`](Self::issue) will hand out, or a later one: work
    /// submitted before this call is covered by it. For work that will be covered by a
    /// callback filed later (the arena's batches sealed while its callback is armed).
    pub fn upcoming(&self) -> Epoch {
        *self.inner.issue.lock() + 1
    }

    /// Hands out the next epoch and files its callback.
    pub fn issue(&self) -> Epoch {
        self.file(None)
    }

    /// Wakes every future waiting for an epoch, done or not: run when the device's loss is
    /// recorded (`lost.rs`), after which those futures resolve with the loss.
    pub fn abandon_all(&self) {
        self.inner.wake(self.done(), true);
        // Dropped on the reaper's thread: the loss may be recorded under any lock, and
        // what a callback holds (a staging slot, an allocation) takes locks of its own
        // when dropped.
        let waiting = std::mem::take(&mut *self.inner.thens.lock());
        if !waiting.is_empty() {
            super::lifecycle::reap(Box::new(waiting));
        }
    }

    /// Drops every callback waiting for an epoch, unrun: on a loss, and when the device's
    /// last `Gpu` goes (what they hold must not outlive it).
    pub fn drop_callbacks(&self) {
        let waiting = std::mem::take(&mut *self.inner.thens.lock());
        drop(waiting);
    }

    /// Marks every epoch filed before `filed` was read done: call after a wait that
    /// covered all submitted work, with `filed` read before the wait began.
    fn complete_through(&self, filed: Epoch) {
        self.inner.complete(filed);
    }
}

impl Inner {
    /// The callbacks of epochs up to `epoch`, taken out (run or dropped by the caller,
    /// outside the lock).
    fn take_thens(&self, epoch: Epoch) -> Vec<(Epoch, Then)> {
        let mut thens = self.thens.lock();
        let due = thens.partition_point(|(e, _)| *e <= epoch);
        thens.drain(..due).collect()
    }

    fn complete(&self, epoch: Epoch) {
        self.done.fetch_max(epoch, Ordering::AcqRel);
        if self.waiting.load(Ordering::Acquire) {
            self.wake(self.done.load(Ordering::Acquire), false);
        }
    }

    /// Wakes the futures waiting for epochs up to `done`, or all of them with `all`.
    #[cold]
    fn wake(&self, done: Epoch, all: bool) {
        let woken: Vec<Waker> = {
            let mut wakers = self.wakers.lock();
            let mut woken = Vec::new();
            wakers.retain(|(epoch, waker)| {
                let due = all || *epoch <= done;
                if due {
                    woken.push(waker.clone());
                }
                !due
            });
            self.waiting.store(!wakers.is_empty(), Ordering::Release);
            woken
        };
        // Outside the lock: a waker may run the future's executor inline.
        for waker in woken {
            waker.wake();
        }
    }
}

/// The future of [`Gpu::epoch_done`].
pub(crate) struct EpochDone {
    gpu: Gpu,
    epoch: Epoch,
}

impl Future for EpochDone {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if let Some(out) = self.outcome() {
            return Poll::Ready(out);
        }
        let work = self.gpu.work_done();
        {
            let mut wakers = work.inner.wakers.lock();
            match wakers.iter_mut().find(|(e, _)| *e == self.epoch) {
                Some((_, w)) if w.will_wake(cx.waker()) => {}
                _ => wakers.push((self.epoch, cx.waker().clone())),
            }
            work.inner.waiting.store(true, Ordering::Release);
        }
        // The callback may have run (or been dropped) between the first check and the
        // registration.
        match self.outcome() {
            Some(out) => Poll::Ready(out),
            None => Poll::Pending,
        }
    }
}

impl EpochDone {
    /// Failed (lost device, or the epoch's callback dropped unrun), done, or neither yet.
    /// The loss comes first: a future pending when it is recorded resolves with it.
    fn outcome(&self) -> Option<Result<()>> {
        let work = self.gpu.work_done();
        if let Err(e) = self.gpu.check_alive() {
            return Some(Err(e));
        }
        if work.is_done(self.epoch) {
            return Some(Ok(()));
        }
        if self.epoch <= work.inner.abandoned.load(Ordering::Acquire) {
            return Some(Err(crate::Error::Device {
                during: "waiting for submitted GPU work".into(),
                message: "the device dropped the work's completion callback (device lost)".into(),
            }));
        }
        None
    }
}

impl Gpu {
    /// The device's tracker of work done.
    #[inline(always)]
    pub(crate) fn work_done(&self) -> &WorkDone {
        &self.inner.work_done
    }

    /// An epoch that completes once the work submitted so far is done (module docs).
    pub(crate) fn work_epoch(&self) -> Epoch {
        self.inner.work_done.issue()
    }

    /// [`work_epoch`](Self::work_epoch), running `then` once the epoch is done (inside
    /// whichever poll finds it done; it must not block).
    pub(crate) fn work_epoch_then(&self, then: impl FnOnce() + Send + 'static) -> Epoch {
        self.inner.work_done.issue_then(then)
    }

    /// A future that resolves once `epoch` is done, or with an error once the device is
    /// lost. Something else must drive the device (module docs).
    pub(crate) fn epoch_done(&self, epoch: Epoch) -> EpochDone {
        EpochDone {
            gpu: self.clone(),
            epoch,
        }
    }

    /// Blocks until `epoch` is done: an empty submission first (a callback filed while
    /// nothing was in flight waits for one), then polls, yielding for the first 200 us
    /// (often that close to done) and sleeping later, so a long wait costs no CPU; after
    /// [`IDLE_AFTER`] it waits for all submitted work, which completes the epoch.
    pub(crate) fn wait_epoch(&self, epoch: Epoch) -> Result<()> {
        let work = self.work_done();
        if work.is_done(epoch) {
            return Ok(());
        }
        super::would_block("waiting for GPU work", "Gpu::wait_idle_async().await")?;
        self.submit([]);
        let start = web_time::Instant::now();
        while !work.is_done(epoch) {
            self.check_alive()?;
            self.poll();
            let waited = start.elapsed();
            if waited > IDLE_AFTER {
                return self.wait_idle();
            }
            if waited < Duration::from_micros(200) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(20));
            }
        }
        Ok(())
    }

    /// Runs the callbacks of `epoch` if the GPU is done with it, without waiting for
    /// the GPU: an empty submission (module docs), then polls for at most `timeout`.
    pub(crate) fn flush_epoch(&self, epoch: Epoch, timeout: Duration) {
        if self.work_done().is_done(epoch) {
            return;
        }
        self.submit([]);
        self.poll_until(timeout, || self.work_done().is_done(epoch));
    }

    /// Polls (running the callbacks that are due) until `done` holds, the queue is empty or
    /// `timeout` has passed; gives up silently: the caller only wants what is ready by then.
    /// Not a `PollType::Wait` with a timeout: in wgpu-core 30 a timed-out wait racing
    /// another thread's poll trips an assertion in `Device::maintain` (gfx-rs/wgpu#9958).
    pub(crate) fn poll_until(&self, timeout: Duration, done: impl Fn() -> bool) {
        // In the browser nothing completes until the page yields: one look is all there is.
        if cfg!(web) {
            self.poll();
            return;
        }
        let start = web_time::Instant::now();
        loop {
            let status = self.poll_device(wgpu::PollType::Poll);
            if done() || !matches!(status, Ok(wgpu::PollStatus::Poll)) || start.elapsed() >= timeout
            {
                return;
            }
            std::thread::yield_now();
        }
    }

    /// Blocks until all submitted work has finished; every epoch handed out before the
    /// call is then done.
    pub fn wait_idle(&self) -> Result<()> {
        let filed = self.work_done().filed();
        self.poll_wait(None, "waiting for the GPU")?;
        self.work_done().complete_through(filed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_done_mark_only_rises_and_wakes_what_it_passes() {
        struct Count(std::sync::atomic::AtomicUsize);
        impl std::task::Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let inner = Inner {
            queue: match crate::Gpu::headless() {
                Ok(gpu) => gpu.queue().clone(),
                Err(e) => panic!("{e}"),
            },
            done: AtomicU64::new(0),
            filed: AtomicU64::new(0),
            issue: Mutex::new(lock_rank::WORK_DONE, 0),
            wakers: Mutex::new(lock_rank::EPOCH_WAKERS, Vec::new()),
            thens: Mutex::new(lock_rank::EPOCH_THENS, Vec::new()),
            waiting: AtomicBool::new(false),
            abandoned: AtomicU64::new(0),
        };
        let count = Arc::new(Count(Default::default()));
        let waker = Waker::from(count.clone());
        inner.wakers.lock().extend([(3, waker.clone()), (5, waker)]);
        inner.waiting.store(true, Ordering::Release);
        inner.complete(4);
        assert_eq!(count.0.load(Ordering::SeqCst), 1, "epoch 3 woken, 5 not");
        inner.complete(2);
        assert_eq!(
            inner.done.load(Ordering::SeqCst),
            4,
            "the mark never goes down"
        );
        inner.complete(5);
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
        assert!(
            !inner.waiting.load(Ordering::SeqCst),
            "nothing left waiting"
        );
    }

    #[test]
    fn a_callback_waiting_on_a_lost_device_is_dropped_and_holds_nothing_of_it() {
        let gpu = crate::Gpu::headless().unwrap();
        let sentinel = Arc::new(());
        let held = sentinel.clone();
        let tracker = Arc::downgrade(&gpu.work_done().inner);
        // Filed with nothing polling: it cannot have run when the loss comes.
        gpu.work_epoch_then(move || drop(held));
        gpu.device().destroy();
        gpu.mark_lost("test: destroyed");
        drop(gpu);
        // Dropped on the reaper's thread (`abandon_all`), unrun.
        let start = std::time::Instant::now();
        while Arc::strong_count(&sentinel) > 1 && start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(Arc::strong_count(&sentinel), 1, "the callback was dropped");
        // wgpu's closure holds only a weak handle: with the last `Gpu` gone, the tracker
        // (and the queue it holds) went too.
        assert!(
            tracker.upgrade().is_none(),
            "nothing keeps the tracker alive"
        );
    }
}

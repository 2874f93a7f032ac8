//! wgpu's error reports where they arrive late: in the browser, WebGPU answers an error
//! scope's pop with a promise that settles only after the page yields to its event loop,
//! so [`scoped`](super::scoped) cannot wait for it (nothing may block there).
//!
//! How it works: `scoped` pops both scopes at once (WebGPU needs them popped in order,
//! before any later scope is pushed) and hands the two promises to a task on the event
//! loop, which files what they report here. The next call into vramkit that opens a scope
//! returns the oldest report filed ([`take`]), and [`Gpu::errors_async`](crate::Gpu::errors_async)
//! waits until every scope opened so far has answered.
//!
//! Promises:
//! - every report is returned once, oldest first, naming the call that caused it (its
//!   `during`), never lost: a report that arrives after the last call waits for the next
//!   one or for `errors_async`;
//! - reports stay with their device: one device's error never comes back from a call on
//!   another (a page may open several, and a test page opens one per test);
//! - the page has one thread (wasm32 without atomics), so the state is thread-local.
//!
//! Natively the reports come back before `scoped` returns, and nothing here is used.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::task::Waker;

use super::Error;

#[derive(Default)]
struct Deferred {
    /// Scopes popped whose answer has not come.
    pending: usize,
    /// Reports that came, oldest first.
    errors: VecDeque<Error>,
    /// Futures of `errors_async` waiting for `pending` to reach zero.
    wakers: Vec<Waker>,
}

thread_local! {
    /// Per device; an entry with nothing pending and nothing filed is removed.
    static DEFERRED: RefCell<Vec<(wgpu::Device, Deferred)>> = RefCell::default();
}

/// Runs `f` on `device`'s entry (made if missing), dropping it when left empty.
fn with<R>(device: &wgpu::Device, f: impl FnOnce(&mut Deferred) -> R) -> R {
    DEFERRED.with(|all| {
        let mut all = all.borrow_mut();
        let i = match all.iter().position(|(d, _)| d == device) {
            Some(i) => i,
            None => {
                all.push((device.clone(), Deferred::default()));
                all.len() - 1
            }
        };
        let out = f(&mut all[i].1);
        let d = &all[i].1;
        if d.pending == 0 && d.errors.is_empty() && d.wakers.is_empty() {
            all.swap_remove(i);
        }
        out
    })
}

/// Files the answers of one popped pair of scopes (out-of-memory, validation) once they
/// settle on the event loop.
pub(super) fn file(
    device: &wgpu::Device,
    during: String,
    answers: impl std::future::Future<Output = Option<wgpu::Error>> + 'static,
) {
    with(device, |d| d.pending += 1);
    let device = device.clone();
    wasm_bindgen_futures::spawn_local(async move {
        let answer = answers.await;
        let wakers = with(&device, |d| {
            d.pending -= 1;
            if let Some(e) = answer {
                d.errors.push_back(Error::Wgpu {
                    during,
                    message: e.to_string(),
                });
            }
            if d.pending == 0 {
                std::mem::take(&mut d.wakers)
            } else {
                Vec::new()
            }
        });
        wakers.into_iter().for_each(Waker::wake);
    });
}

/// The oldest report filed for `device` and not yet returned.
pub(crate) fn take(device: &wgpu::Device) -> Option<Error> {
    with(device, |d| d.errors.pop_front())
}

/// Resolves once every scope popped on `device` so far has answered, with the oldest
/// report.
pub(crate) async fn settled(device: &wgpu::Device) -> Option<Error> {
    std::future::poll_fn(|cx| {
        with(device, |d| {
            if d.pending == 0 {
                std::task::Poll::Ready(d.errors.pop_front())
            } else {
                d.wakers.push(cx.waker().clone());
                std::task::Poll::Pending
            }
        })
    })
    .await
}

//! wgpu's error scopes around vramkit's calls into wgpu: every call that user input can
//! reach runs inside [`scoped`], so a bad argument becomes [`Error::Wgpu`] instead of a
//! panic in wgpu's uncaptured-error handler. In the browser the scopes answer late
//! (`deferred.rs`).

#[cfg(web)]
#[path = "deferred.rs"]
pub(crate) mod deferred;

use crate::{Error, Result};

/// Runs `f` inside wgpu error scopes (out-of-memory and validation) on `device` and turns
/// a captured error into [`Error::Wgpu`]. Used wherever user input reaches wgpu, so bad
/// input never becomes a panic in the uncaptured-error handler.
pub(crate) fn scoped<T>(device: &wgpu::Device, during: &str, f: impl FnOnce() -> T) -> Result<T> {
    // In the browser a report of an earlier call may have come meanwhile (`deferred.rs`).
    #[cfg(web)]
    if let Some(e) = deferred::take(device) {
        return Err(e);
    }
    let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let value = f();
    // Popped now, innermost first, in both cases: a later scope must not nest in these.
    let validation = validation.pop();
    let oom = oom.pop();
    #[cfg(web)]
    {
        // Nothing may block in the browser: the answers are filed when they come and
        // returned by the next call (`deferred.rs`).
        deferred::file(device, during.into(), async move {
            let validation = validation.await;
            oom.await.or(validation)
        });
        Ok(value)
    }
    #[cfg(native)]
    match pollster::block_on(oom).or(pollster::block_on(validation)) {
        None => Ok(value),
        Some(e) => Err(Error::Wgpu {
            during: during.into(),
            message: e.to_string(),
        }),
    }
}

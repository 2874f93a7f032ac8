//! What every thread of a hung test binary is doing, for a failure report.
//!
//! A deadlock on a GPU machine without a debugger leaves only kernel wait channels in
//! `/proc`. [`dump_all_threads`] sends each thread of the process a signal whose handler
//! records the thread's return addresses (no allocation, no lock: the thread may hold the
//! allocator's or the loader's), waits for it, and resolves the addresses to symbols on
//! the calling thread. [`start_watchdog`] does it once when the binary outlives
//! `VRAMKIT_TEST_HANG_S` seconds, then aborts, so a hang prints where it waits instead of
//! running into the caller's timeout.

use std::ffi::c_void;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const MAX_FRAMES: usize = 96;

/// The signalled thread's return addresses; one thread at a time (`DUMPING`).
static FRAMES: [AtomicUsize; MAX_FRAMES] = [const { AtomicUsize::new(0) }; MAX_FRAMES];
static DEPTH: AtomicUsize = AtomicUsize::new(0);
static RECORDED: AtomicBool = AtomicBool::new(false);
static DUMPING: parking_lot::Mutex<()> = parking_lot::const_mutex(());

extern "C" fn record_frames(_signal: libc::c_int) {
    let mut depth = 0;
    // SAFETY: `trace_unsynchronized` walks this thread's own stack; the closure only
    // stores integers in atomics. No other thread traces at the same time (`DUMPING`).
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            FRAMES[depth].store(frame.ip() as usize, Ordering::Relaxed);
            depth += 1;
            depth < MAX_FRAMES
        });
    }
    DEPTH.store(depth, Ordering::Relaxed);
    RECORDED.store(true, Ordering::Release);
}

/// Every thread of this process: name, state, kernel wait channel and user stack.
pub fn dump_all_threads() -> String {
    let _one = DUMPING.lock();
    // SAFETY: installs a handler that only records into atomics (above).
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = record_frames as extern "C" fn(libc::c_int) as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGUSR2, &action, std::ptr::null_mut());
    }
    let pid = std::process::id() as libc::pid_t;
    let mut out = String::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return "no /proc/self/task".into();
    };
    let read = |tid: &str, file: &str| {
        std::fs::read_to_string(format!("/proc/self/task/{tid}/{file}")).unwrap_or_default()
    };
    for task in tasks.flatten() {
        let tid = task.file_name().to_string_lossy().into_owned();
        let state = read(&tid, "stat")
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next().map(str::to_owned))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "--- thread {tid} '{}' state {state} wchan {}",
            read(&tid, "comm").trim(),
            read(&tid, "wchan")
        );
        RECORDED.store(false, Ordering::Release);
        let Ok(tid_num) = tid.parse::<libc::pid_t>() else {
            continue;
        };
        // SAFETY: signals one thread of this process; the handler is installed above.
        unsafe {
            libc::syscall(libc::SYS_tgkill, pid, tid_num, libc::SIGUSR2);
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while !RECORDED.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if !RECORDED.load(Ordering::Acquire) {
            let _ = writeln!(out, "    (did not answer the signal within 2 s)");
            continue;
        }
        // Frame 0-1 are the handler and the signal trampoline.
        for slot in FRAMES.iter().take(DEPTH.load(Ordering::Relaxed)).skip(2) {
            let ip = slot.load(Ordering::Relaxed);
            // One line per function, inlined ones included, innermost first.
            let mut resolved = false;
            backtrace::resolve(ip as *mut c_void, |symbol| {
                resolved = true;
                let name = symbol.name().map(|n| format!("{n:#}")).unwrap_or_default();
                let name: String = name.chars().take(150).collect();
                let at = match (symbol.filename(), symbol.lineno()) {
                    (Some(file), Some(n)) => {
                        let file = file.to_string_lossy();
                        let short = file.rsplit("/src/").next().unwrap_or(&file).to_owned();
                        format!(" ({short}:{n})")
                    }
                    _ => String::new(),
                };
                let _ = writeln!(out, "    {name}{at}");
            });
            if !resolved {
                let _ = writeln!(out, "    {ip:#x}");
            }
        }
    }
    out
}

/// With `VRAMKIT_TEST_HANG_S=N`, a thread that dumps every thread's stack to stderr and
/// aborts the process once it has run N seconds. Starting it twice is harmless.
pub fn start_watchdog() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    let Some(secs) = std::env::var("VRAMKIT_TEST_HANG_S")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        return;
    };
    STARTED.call_once(|| {
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(secs));
            eprintln!(
                "VRAMKIT_TEST_HANG_S: still running after {secs} s; every thread:\n{}",
                dump_all_threads()
            );
            std::process::abort();
        });
    });
}

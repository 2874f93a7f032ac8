//! Watch an arena live: a mixed workload (uploads, profiled kernels checked against the
//! CPU, downloads, and spikes that run into the budget and trim) while `/metrics` is
//! served in the Prometheus text format (`metrics-exporter-prometheus` renders it; a
//! thread of this example answers HTTP with the standard library, so no async runtime is
//! built), then the memory history as a Perfetto trace and a timeline picture.
//!
//! ```text
//! cargo run --release --features metrics --example monitor              # 20 s, :9464
//! curl -s localhost:9464/metrics | grep vramkit_                        # meanwhile
//! cargo run --release --features metrics --example monitor -- --once    # one scrape to stdout
//! ```
//!
//! Options: `--seconds S` (default 20), `--port P` (default 9464), `--once` (a short
//! workload, one scrape printed in the Prometheus text format, no server). Every run
//! writes `memory_trace.json` (open in ui.perfetto.dev or chrome://tracing) and
//! `memory_timeline.svg` into the current directory, and exits non-zero if a kernel
//! result differed from the CPU reference.

#[path = "support/observe.rs"]
mod observe;

use std::time::{Duration, Instant};

use metrics_exporter_prometheus::PrometheusBuilder;
use vramkit::arena::HistoryConfig;
use vramkit::Runtime;

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map(|v| v.parse::<u64>())
            .transpose()
    };
    let once = args.iter().any(|a| a == "--once");
    let seconds = value("--seconds")?.unwrap_or(20);
    let port = value("--port")?.unwrap_or(9464) as u16;
    let recorder = PrometheusBuilder::new().install_recorder()?;
    let handle = if once {
        Some(recorder)
    } else {
        serve(recorder, port)?;
        eprintln!("serving http://127.0.0.1:{port}/metrics for {seconds} s");
        None
    };
    let rt = Runtime::headless()?;
    eprintln!("{}", rt.gpu().describe());
    rt.arena().record_history(Some(HistoryConfig::default()));
    rt.gpu().set_profiling(true)?;
    let deadline = Instant::now() + Duration::from_secs(if once { 0 } else { seconds });
    let mut total = observe::Report::default();
    let mut round = 0;
    loop {
        let r = observe::mixed_workload(&rt, 40, 20, round)?;
        total.iterations += r.iterations;
        total.mismatches += r.mismatches;
        total.ooms += r.ooms;
        total.bytes_trimmed += r.bytes_trimmed;
        total.last_oom = r.last_oom.or(total.last_oom);
        rt.gpu().collect_profile(true)?;
        rt.arena().publish_metrics();
        round += 1;
        if Instant::now() >= deadline {
            break;
        }
    }
    let history = rt
        .arena()
        .history()
        .ok_or("the memory history stopped recording")?;
    history.write_chrome_trace("memory_trace.json")?;
    history.write_timeline_svg("memory_timeline.svg")?;
    if let Some(handle) = &handle {
        print!("{}", handle.render());
    }
    eprintln!(
        "iterations {}, mismatches {}, out-of-memory spikes {}, trimmed {}, history {} events ({} folded), {} GPU spans",
        total.iterations,
        total.mismatches,
        total.ooms,
        vramkit::fmt_bytes(total.bytes_trimmed),
        history.events.len(),
        history.dropped,
        history.gpu_spans.len()
    );
    if let Some(oom) = &total.last_oom {
        eprintln!("last spike: {oom}");
    }
    eprintln!("wrote memory_trace.json and memory_timeline.svg");
    if total.mismatches > 0 {
        return Err(format!("{} kernel results differed from the CPU", total.mismatches).into());
    }
    Ok(())
}

/// Answers every HTTP request on `127.0.0.1:port` with the current metrics, on a thread
/// of its own (a scrape every few seconds needs nothing more).
fn serve(
    recorder: metrics_exporter_prometheus::PrometheusHandle,
    port: u16,
) -> std::io::Result<()> {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind(("127.0.0.1", port))?;
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            // The request itself does not matter: every path gets the metrics.
            let mut request = [0u8; 1024];
            let _ = stream.read(&mut request);
            let body = recorder.render();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    Ok(())
}

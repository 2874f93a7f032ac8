//! Fuzzes the trace parser and replay: any bytes give events or a typed error, never a
//! panic, and the events replay in memory bounded by their number.
//!
//! ```text
//! fuzz/run-stable.sh 60 trace_parser
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramkit::alloc::trace::{parse_csv, replay};
use vramkit::alloc::{BlockPolicy, RangeAllocator};

fuzz_target!(|bytes: &[u8]| {
    if let Ok(events) = parse_csv(std::io::Cursor::new(bytes)) {
        // Sizes come from the input: a small policy keeps blocks virtual (nothing is
        // backed), and requests past MAX_CAPACITY fail as typed errors, counted.
        let report = replay::<RangeAllocator>(&events, &BlockPolicy::default(), 256);
        assert_eq!(report.events, events.len());
    }
});

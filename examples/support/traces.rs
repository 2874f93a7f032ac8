//! The allocation traces of `examples/data`: where they are and how to read one.

use std::io::BufReader;
use std::path::{Path, PathBuf};

use vramkit::alloc::trace::{parse_csv, TraceEvent};

/// The folder of the shipped traces.
pub const DATA: &str = {
    // Built into the crate's examples, or into `lab/` one folder down.
    const HERE: &str = env!("CARGO_MANIFEST_DIR");
    if HERE.len() >= 4 && matches_lab(HERE.as_bytes()) {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data")
    } else {
        concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data")
    }
};

/// Whether a manifest directory is the lab's (ends in `/lab`), in a `const` context.
const fn matches_lab(dir: &[u8]) -> bool {
    let n = dir.len();
    dir[n - 4] == b'/' && dir[n - 3] == b'l' && dir[n - 2] == b'a' && dir[n - 1] == b'b'
}

/// Every `*.csv.gz` trace in [`DATA`], sorted by name.
pub fn all() -> std::io::Result<Vec<PathBuf>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(DATA)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".csv.gz"))
        .collect();
    paths.sort();
    Ok(paths)
}

/// The events of the gzipped CSV trace at `path`.
pub fn load(path: &Path) -> Result<Vec<TraceEvent>, Box<dyn std::error::Error>> {
    let file = std::fs::File::open(path)
        .map_err(|e| format!("cannot open trace {}: {e}", path.display()))?;
    Ok(parse_csv(BufReader::new(flate2::read::GzDecoder::new(
        file,
    )))?)
}

//! Fuzzes the virtual-texture pack reader: any bytes give a typed error or a pack whose
//! every tile reads as a full tile or a typed error, never a panic or an allocation past
//! one tile.
//!
//! ```text
//! fuzz/run-stable.sh 60 vt_pack
//! ```
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramkit::vt::{tile_bytes, PackFile, TileId, TileSource};

fuzz_target!(|bytes: &[u8]| {
    if let Ok(pack) = PackFile::from_bytes(bytes.to_vec()) {
        let layout = pack.layout();
        // The index lies inside the input, so a valid header names few tiles.
        for level in 0..layout.levels {
            let (px, py) = layout.pages(level);
            for y in 0..py.min(64) {
                for x in 0..px.min(64) {
                    if let Ok(tile) = pack.read_tile(TileId::new(level, x, y)) {
                        assert_eq!(Some(tile.len()), tile_bytes(pack.format()));
                    }
                }
            }
        }
    }
});

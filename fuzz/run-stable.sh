#!/usr/bin/env bash
# Builds and runs a fuzz target with stable Rust (cargo fuzz needs nightly): libFuzzer's
# coverage instrumentation through stable codegen flags. Usage:
#   fuzz/run-stable.sh [SECONDS] [TARGET]     (targets: range_allocator, block_set, trace_parser, vt_pack)
set -euo pipefail
cd "$(dirname "$0")"
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=3 \
 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
 -Cllvm-args=-sanitizer-coverage-trace-compares -Cdebug-assertions"
# An explicit target keeps the flags away from build scripts.
# --locked: the tracked Cargo.lock is the one to build with (a stale lock fails here
# instead of being rewritten).
cargo build --release --locked --target x86_64-unknown-linux-gnu
target="${2:-range_allocator}"
mkdir -p "corpus/$target"
"./target/x86_64-unknown-linux-gnu/release/$target" -max_total_time="${1:-60}" "corpus/$target"

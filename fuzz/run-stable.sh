#!/usr/bin/env bash
# Builds and runs the allocator fuzz target with stable Rust (cargo fuzz needs nightly):
# libFuzzer's coverage instrumentation through stable codegen flags. Usage:
#   fuzz/run-stable.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")"
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=3 \
 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
 -Cllvm-args=-sanitizer-coverage-trace-compares -Cdebug-assertions"
# An explicit target keeps the flags away from build scripts.
cargo build --release --target x86_64-unknown-linux-gnu
mkdir -p corpus/range_allocator
./target/x86_64-unknown-linux-gnu/release/range_allocator -max_total_time="${1:-60}" corpus/range_allocator

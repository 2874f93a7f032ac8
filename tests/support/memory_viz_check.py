#!/usr/bin/env python3
"""Checks a memory snapshot the way PyTorch's memory_viz page reads it.

Usage: memory_viz_check.py SNAPSHOT.pickle [MIN_EVENTS]

Loads the file with Python's own pickle (no PyTorch needed), checks every field that
memory_viz's JavaScript reads and the types it expects, that each segment's blocks tile
it, and replays the trace backwards from the final state as the page's "Allocator State
History" view does: every live block must lie inside a segment at every step (where the
page would dereference a missing segment), and every `free_requested` must be followed by
its `free_completed` (the page merges the two; a lone one dereferences a missing block).
Prints one line of counts and exits 0, or names the first problem and exits 1.
"""
import pickle
import sys

ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "oom", "snapshot"}
STATES = {"active_allocated", "active_pending_free", "inactive"}
JS_EXACT = 2 ** 53


def fail(msg):
    print(f"memory_viz_check: {msg}")
    sys.exit(1)


def need(d, key, kind, where):
    if key not in d:
        fail(f"{where}: no '{key}'")
    if not isinstance(d[key], kind) or (kind is int and isinstance(d[key], bool)):
        fail(f"{where}: '{key}' is {type(d[key]).__name__}, not {kind}")
    return d[key]


def check_frames(frames, where):
    for f in frames:
        if not isinstance(f, dict):
            fail(f"{where}: a frame is not a dict")
        need(f, "filename", str, where)
        need(f, "line", int, where)
        need(f, "name", str, where)


def main():
    path = sys.argv[1]
    min_events = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    with open(path, "rb") as fh:
        snap = pickle.load(fh)
    if not isinstance(snap, dict):
        fail("the snapshot is not a dict")
    segments = need(snap, "segments", list, "snapshot")
    traces = need(snap, "device_traces", list, "snapshot")
    if not traces or not all(isinstance(t, list) for t in traces):
        fail("device_traces is not a list of lists")

    segs = {}  # address -> size, device 0
    blocks = {}  # address -> size, live or pending
    nblocks = 0
    for i, s in enumerate(segments):
        w = f"segment {i}"
        for key in ("device", "address", "total_size", "allocated_size", "active_size",
                    "requested_size", "stream"):
            need(s, key, int, w)
        if need(s, "segment_type", str, w) not in ("large", "small"):
            fail(f"{w}: segment_type {s['segment_type']}")
        need(s, "segment_pool_id", tuple, w)
        need(s, "is_expandable", bool, w)
        check_frames(need(s, "frames", list, w), w)
        addr = s["address"]
        allocated = 0
        for j, b in enumerate(need(s, "blocks", list, w)):
            wb = f"{w} block {j}"
            if need(b, "address", int, wb) != addr:
                fail(f"{wb}: at {b['address']:#x}, the blocks before end at {addr:#x}")
            size = need(b, "size", int, wb)
            if need(b, "requested_size", int, wb) > size:
                fail(f"{wb}: requested more than its size")
            state = need(b, "state", str, wb)
            if state not in STATES:
                fail(f"{wb}: state {state}")
            check_frames(need(b, "frames", list, wb), wb)
            if state == "active_allocated":
                allocated += size
            if state != "inactive" and s["device"] == 0:
                blocks[addr] = size
            addr += size
            nblocks += 1
        if addr != s["address"] + s["total_size"]:
            fail(f"{w}: blocks end at {addr:#x}, the segment at {s['address'] + s['total_size']:#x}")
        if allocated != s["allocated_size"]:
            fail(f"{w}: allocated_size {s['allocated_size']}, its blocks {allocated}")
        if addr >= JS_EXACT:
            fail(f"{w}: addresses past 2^53 lose precision in the page")
        if s["device"] == 0:
            segs[s["address"]] = s["total_size"]

    events = traces[0]
    last_t = -1
    for i, e in enumerate(events):
        w = f"event {i}"
        action = need(e, "action", str, w)
        if action not in ACTIONS:
            fail(f"{w}: action {action}")
        need(e, "addr", int, w)
        need(e, "size", int, w)
        need(e, "stream", int, w)
        check_frames(e.get("frames", []), w)
        t = need(e, "time_us", int, w)
        if t < last_t:
            fail(f"{w}: time goes back")
        last_t = t
        if action == "oom":
            need(e, "device_free", int, w)
        if action == "free_requested":
            nxt = events[i + 1] if i + 1 < len(events) else None
            if not nxt or nxt.get("action") != "free_completed" or nxt.get("addr") != e["addr"]:
                fail(f"{w}: free_requested without its free_completed")

    def inside(addr, size):
        return any(a <= addr and addr + size <= a + n for a, n in segs.items())

    for a, n in blocks.items():
        if not inside(a, n):
            fail(f"live block {a:#x} is in no segment")
    # Backwards, as the page's segment view replays it.
    for i in range(len(events) - 1, -1, -1):
        e = events[i]
        a, n = e["addr"], e["size"]
        act = e["action"]
        if act == "free_completed":
            if not inside(a, n):
                fail(f"event {i}: before this free, block {a:#x} would be in no segment")
            blocks[a] = n
        elif act == "alloc":
            if a not in blocks:
                fail(f"event {i}: an alloc at {a:#x} that the state after it does not hold")
            del blocks[a]
        elif act == "segment_free":
            segs[a] = n
        elif act == "segment_alloc":
            if a not in segs:
                fail(f"event {i}: a segment_alloc at {a:#x} that the state after it does not hold")
            del segs[a]
            if any(a <= b < a + n for b in blocks):
                fail(f"event {i}: a block lives in segment {a:#x} before it was made")
    if len(events) < min_events:
        fail(f"{len(events)} events, fewer than {min_events}")
    print(f"memory_viz_check: ok: {len(segments)} segments, {nblocks} blocks, {len(events)} events")


main()

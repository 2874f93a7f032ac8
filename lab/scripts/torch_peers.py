"""Hardware ceilings and PyTorch peers, measured on the same machine as vramkit's bench.

Prints one `name: value` line per figure (GB/s count bytes read + written where noted).
Run on the GPU machine: python3 lab/scripts/torch_peers.py
"""
import time

import torch


def bench(fn, calls=30, batches=3):
    """Seconds per call: the same statistic as vramkit's `bench` (examples/support/
    bench_gpu.rs): one warm-up batch, then the best of `batches` batches of `calls`
    back-to-back calls, each batch timed from its first launch to its completion.
    Transfers use calls=1, batches=5 (vramkit's stream suite: best of 5 single calls)."""

    def batch(n):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(n):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / 1e3

    batch(calls)
    return min(batch(calls) for _ in range(batches)) / calls


def transfer(fn):
    return bench(fn, calls=1, batches=5)


def warm_until_steady(what, step):
    """The same rule as vramkit's bench: `step` (seconds it measured) until the clocks have
    ramped up (at least 0.5 s, and three steps in a row within 2 %, at most 10 s)."""
    start = time.perf_counter()
    last = []
    while True:
        last = (last + [step()])[-3:]
        elapsed = time.perf_counter() - start
        if (elapsed >= 0.5 and len(last) == 3 and max(last) <= min(last) * 1.02) or elapsed > 10:
            break
    print(f"{what}_warmup_ms: {elapsed * 1e3:.0f}")


def warm_up(dev):
    """y += a*x batches, as vramkit's bench warms up its kernels."""
    x = torch.rand(1 << 26, device=dev)
    y = torch.rand(1 << 26, device=dev)
    warm_until_steady("torch", lambda: bench(lambda: y.add_(x, alpha=1e-6), calls=10, batches=1))


def main():
    dev = torch.device("cuda")
    print(f"torch_device: {torch.cuda.get_device_name(0)}")
    warm_up(dev)
    nbytes = 1 << 30
    host = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    host.random_(0, 255)
    gpu = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    t = transfer(lambda: gpu.copy_(host, non_blocking=True))
    print(f"torch_pinned_h2d_gbps: {nbytes / t / 1e9:.2f}")
    t = transfer(lambda: host.copy_(gpu, non_blocking=True))
    print(f"torch_pinned_d2h_gbps: {nbytes / t / 1e9:.2f}")
    # Pageable (ordinary) host memory: the CUDA driver stages through pinned buffers of its
    # own, as vramkit's upload(&[u8]) and download_into(&mut [u8]) do.
    pageable = torch.empty(nbytes, dtype=torch.uint8)
    pageable.random_(0, 255)
    t = transfer(lambda: gpu.copy_(pageable))
    print(f"torch_pageable_h2d_gbps: {nbytes / t / 1e9:.2f}")
    t = transfer(lambda: pageable.copy_(gpu))
    print(f"torch_pageable_d2h_gbps: {nbytes / t / 1e9:.2f}")
    del pageable
    other = torch.empty_like(gpu)
    t = bench(lambda: other.copy_(gpu))
    print(f"torch_device_copy_gbps: {2 * nbytes / t / 1e9:.1f}")
    del host, gpu, other

    n = 1 << 26
    x = torch.rand(n, device=dev)
    y = torch.rand(n, device=dev)
    t = bench(lambda: y.add_(x, alpha=1e-6))
    print(f"torch_add_gbps: {3 * 4 * n / t / 1e9:.1f}")
    t = bench(lambda: y.copy_(x))
    print(f"torch_copy_f32_gbps: {2 * 4 * n / t / 1e9:.1f}")
    t = bench(lambda: y.fill_(1.0))
    print(f"torch_fill_gbps: {4 * n / t / 1e9:.1f}")
    t = bench(lambda: x.sum())
    print(f"torch_sum_gbps: {4 * n / t / 1e9:.1f}")
    z = torch.empty_like(x)
    t = bench(lambda: torch.add(x, y, out=z))
    print(f"torch_add_out_gbps: {3 * 4 * n / t / 1e9:.1f}")
    t = bench(lambda: torch.nn.functional.gelu(x))
    print(f"torch_gelu_gbps: {2 * 4 * n / t / 1e9:.1f}")
    t = bench(lambda: torch.cumsum(x, 0, out=z))
    print(f"torch_cumsum_f32_gbps: {2 * 4 * n / t / 1e9:.1f}")
    # The peer of the u32 scan: int32 in and out (same bits, wrapping).
    xi = torch.randint(0, 1 << 30, (n,), dtype=torch.int32, device=dev)
    zi = torch.empty_like(xi)
    t = bench(lambda: torch.cumsum(xi, 0, dtype=torch.int32, out=zi))
    print(f"torch_cumsum_i32_gbps: {2 * 4 * n / t / 1e9:.1f}")
    del xi, zi
    t = bench(lambda: x.half())
    print(f"torch_to_f16_gbps: {6 * n / t / 1e9:.1f}")
    side = 8192
    sq = x[: side * side].view(side, side)
    t = bench(lambda: sq.t().contiguous())
    print(f"torch_transpose_gbps: {2 * 4 * side * side / t / 1e9:.1f}")
    rows = n // 16384
    t = bench(lambda: torch.softmax(x.view(rows, 16384), dim=1))
    print(f"torch_softmax_gbps: {2 * 4 * n / t / 1e9:.1f}")
    # Vocabulary-sized rows and attention-score rows, as vramkit's bench.
    for cols in (32000, 50257, 128, 197):
        rows = n // cols
        v = x[: rows * cols].view(rows, cols)
        t = bench(lambda: torch.softmax(v, dim=1))
        print(f"torch_softmax_{cols}_gbps: {2 * 4 * rows * cols / t / 1e9:.1f}")
    del x, y, z

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    # At 4096^3 and 8192^3, as `bench kernels` prints (`kernel_matmul_*_tflops`,
    # `kernel_matmul_*_8192_tflops`).
    for m, suffix, fp32_calls in ((4096, "", 10), (8192, "_8192", 5)):
        a = torch.randn(m, m, device=dev)
        b = torch.randn(m, m, device=dev)
        if m == 4096:
            # Products until steady first, as vramkit's bench does before its own.
            warm_until_steady("torch_matmul", lambda: bench(lambda: a @ b, calls=10, batches=1))
        t = bench(lambda: a @ b, calls=fp32_calls)
        print(f"torch_matmul_fp32{suffix}_tflops: {2 * m ** 3 / t / 1e12:.1f}")
        ah, bh = a.half(), b.half()
        t = bench(lambda: ah @ bh, calls=10)
        print(f"torch_matmul_fp16{suffix}_tflops: {2 * m ** 3 / t / 1e12:.1f}")
        del a, b, ah, bh
    # A small output with a long k, as `bench kernels` prints it
    # (`kernel_matmul_*_long_k_tflops`): 512 x 512 x 8192. One f16 product takes about
    # 20 us of GPU time, less than Python takes to launch it (back-to-back calls read
    # 154-241 TFLOP/s in two runs of one call), so `per_graph` products are captured in a
    # CUDA graph and the graph is replayed: GPU time per product, as vramkit's batches
    # measure their own.
    m, k = 512, 8192
    for dtype, name, per_graph in ((torch.float32, "fp32", 10), (torch.float16, "fp16", 50)):
        x = torch.randn(m, k, device=dev, dtype=dtype)
        y = torch.randn(k, m, device=dev, dtype=dtype)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                x @ y
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(per_graph):
                x @ y
        t = bench(graph.replay, calls=10) / per_graph
        print(f"torch_matmul_{name}_long_k_tflops: {2 * m * m * k / t / 1e12:.1f}")
        del graph, x, y

    # Batched products at vramkit's `bench kernels` attention shapes: 32 heads,
    # scores = Q K^T (2048 x 128 by 128 x 2048) and out = P V (2048 x 2048 by 2048 x 128).
    heads, seq, dh = 32, 2048, 128
    for dtype, name in ((torch.float32, "fp32"), (torch.float16, "fp16")):
        q = torch.randn(heads, seq, dh, device=dev, dtype=dtype)
        kt = torch.randn(heads, dh, seq, device=dev, dtype=dtype)
        p = torch.randn(heads, seq, seq, device=dev, dtype=dtype)
        v = torch.randn(heads, seq, dh, device=dev, dtype=dtype)
        t = bench(lambda: (torch.bmm(q, kt), torch.bmm(p, v)), calls=10)
        print(f"torch_bmm_{name}_tflops: {4 * heads * seq * seq * dh / t / 1e12:.1f}")
        del q, kt, p, v

    # The caching allocator's own alloc+free (host time, as vramkit's arena is measured).
    for size in (256, 1 << 20, 64 << 20):
        for _ in range(100):
            del_t = torch.empty(size, dtype=torch.uint8, device=dev)
            del del_t
        iters = 20000
        start = time.perf_counter()
        for _ in range(iters):
            tmp = torch.empty(size, dtype=torch.uint8, device=dev)
            del tmp
        us = (time.perf_counter() - start) / iters * 1e6
        print(f"torch_empty_free_us_{size}: {us:.3f}")


if __name__ == "__main__":
    main()

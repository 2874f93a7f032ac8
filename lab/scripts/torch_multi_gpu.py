"""PyTorch's figures between two GPUs of one host, the peers of `data_parallel`'s lines:
peer copy (NVLink or PCIe peer-to-peer), the host path one copy after the other and in
64 MiB chunks with the two copies overlapped, and NCCL's all-reduce (sum, f32).

    python3 lab/scripts/torch_multi_gpu.py [--gib 1]

Prints `name: value` lines (GB/s); algbw as NCCL reports it (array bytes / time).
"""
import argparse
import time

import torch


def timed(fn, repeat=5):
    fn()
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
        best = min(best, time.perf_counter() - start)
    return best


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--allreduce-only", action="store_true")
    a = p.parse_args()
    n = int(a.gib * (1 << 30)) // 4
    if torch.cuda.device_count() < 2:
        print("torch_devices: %d (need 2)" % torch.cuda.device_count())
        return
    print("torch_devices: %d" % torch.cuda.device_count())
    if a.allreduce_only:
        return run_allreduce(n)
    src = torch.rand(n, device="cuda:0")
    dst = torch.empty(n, device="cuda:1")
    nbytes = n * 4
    t = timed(lambda: dst.copy_(src))
    print("torch_peer_copy_gbps: %.1f" % (nbytes / t / 1e9))
    host = torch.empty(n, pin_memory=True)

    def serial():
        host.copy_(src)
        torch.cuda.synchronize(0)
        dst.copy_(host)

    t = timed(serial)
    print("torch_host_serial_gbps: %.1f" % (nbytes / t / 1e9))
    chunk = (64 << 20) // 4
    s0 = torch.cuda.Stream(device=0)
    s1 = torch.cuda.Stream(device=1)

    def overlapped():
        events = []
        for i in range(0, n, chunk):
            with torch.cuda.stream(s0):
                host[i:i + chunk].copy_(src[i:i + chunk], non_blocking=True)
                e = torch.cuda.Event()
                e.record(s0)
            events.append((i, e))
        for i, e in events:
            e.synchronize()
            with torch.cuda.stream(s1):
                dst[i:i + chunk].copy_(host[i:i + chunk], non_blocking=True)
        s1.synchronize()

    t = timed(overlapped)
    print("torch_host_overlapped_gbps: %.1f" % (nbytes / t / 1e9))
    run_allreduce(n)


def run_allreduce(n):
    """NCCL's all-reduce: one process per GPU through torch.multiprocessing."""
    import torch.multiprocessing as mp
    q = mp.get_context("spawn").SimpleQueue()
    procs = [mp.get_context("spawn").Process(target=worker, args=(r, n, q)) for r in range(2)]
    for pr in procs:
        pr.start()
    for pr in procs:
        pr.join()
    while not q.empty():
        print(q.get())


def worker(rank, n, q):
    import os
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29512")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=2)
    x = torch.ones(n, device="cuda:%d" % rank)
    for _ in range(3):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        dist.barrier()
        torch.cuda.synchronize()
        start = time.perf_counter()
        dist.all_reduce(x)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    if rank == 0:
        # NCCL_P2P_DISABLE=1 sends NCCL through host memory, the path vramkit has.
        suffix = "_no_p2p" if os.environ.get("NCCL_P2P_DISABLE") == "1" else ""
        q.put("torch_nccl_allreduce%s_gbps: %.1f" % (suffix, n * 4 / best / 1e9))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

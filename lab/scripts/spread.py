"""Runs a benchmark command in several fresh processes and prints, per figure, the lowest
and highest value and the spread between them.

Every `name: value` line the command prints is a figure (the format of `bench`,
`replay`, `loop_reuse` and `torch_peers.py`). A fresh process per run is the point: some
effects (clocks, memory placement) last for a process's lifetime.

    python3 lab/scripts/spread.py -n 3 -- ./target/release/bench kernels
    python3 lab/scripts/spread.py -n 3 --max-spread 5 -- ./bench kernels   # exit 1 past 5 %
    python3 lab/scripts/spread.py -n 3 --save out/kernels -- ./bench kernels  # keep each output
    python3 lab/scripts/spread.py -n 3 --only '(matmul|bmm).*_tflops$' --max-spread 2 -- ./bench kernels

`--only` keeps the figures whose names match a regular expression, so a check on GPU
figures is not failed by a host-timed one (`kernel_cpu_us_per_dispatch` moves 30-70 %
between processes on a busy host).
"""
import argparse
import re
import subprocess
import sys

# Names keep their units' capitals (`arena_alloc_free_us_64KiB`).
FIGURE = re.compile(r"^([a-z][A-Za-z0-9_]*): (-?[0-9.]+(?:e-?[0-9]+)?)\s*$")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=3, help="fresh processes (default 3)")
    parser.add_argument("--max-spread", type=float, default=None,
                        help="exit 1 when any figure spreads more than this many percent")
    parser.add_argument("--save", default=None,
                        help="also write run K's whole output to SAVE.K.txt")
    parser.add_argument("--only", default=None,
                        help="keep only the figures whose names match this regular expression")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    runs = []
    for i in range(args.n):
        out = subprocess.run(command, capture_output=True, text=True)
        if args.save:
            with open(f"{args.save}.{i + 1}.txt", "w") as f:
                f.write(out.stdout + out.stderr)
        if out.returncode != 0:
            sys.stderr.write(out.stdout + out.stderr)
            sys.exit(f"run {i + 1} failed with exit code {out.returncode}")
        figures = {}
        for line in out.stdout.splitlines():
            m = FIGURE.match(line.strip())
            if m:
                figures[m.group(1)] = float(m.group(2))
        runs.append(figures)
    names = [n for n in runs[0] if all(n in r for r in runs)]
    if args.only:
        keep = re.compile(args.only)
        names = [n for n in names if keep.search(n)]
        if not names:
            sys.exit(f"no figure matches --only {args.only!r}")
    worst = 0.0
    print(f"{'figure':<44} {'min':>12} {'max':>12} {'spread':>8}")
    for name in names:
        values = [r[name] for r in runs]
        lo, hi = min(values), max(values)
        spread = (hi - lo) / abs(lo) * 100 if lo else 0.0
        worst = max(worst, spread)
        print(f"{name:<44} {lo:>12.4g} {hi:>12.4g} {spread:>7.1f}%")
    print(f"runs: {args.n}")
    print(f"worst_spread_percent: {worst:.1f}")
    if args.max_spread is not None and worst > args.max_spread:
        sys.exit(1)


if __name__ == "__main__":
    main()

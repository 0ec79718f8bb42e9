"""Wall time of the golden model at the paper's shape (1, 16, 1280, 128), on one core.

Usage: python scripts/bench_golden.py --out FILE.md [--repeat 3]
BLAS is limited to one thread before NumPy loads; the median of --repeat runs is reported per
allocation, on uniform U(19.5, 20.5) inputs (the paper's mean-20 case).
"""

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from datetime import date  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from pasa_npu import golden  # noqa: E402
from pasa_npu.precision import PRECISIONS  # noqa: E402

SHAPE = (1, 16, 1280, 128)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", required=True, help="the Markdown file to write (docs/benchmarks/golden_speed.md "
                    "holds the committed run)")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    q, k, v = (rng.uniform(19.5, 20.5, SHAPE).astype(np.float32) for _ in range(3))
    scale = SHAPE[-1] ** -0.5
    runs = {p: (lambda p=p: golden.attention(q, k, v, precision=p, scale=scale)) for p in PRECISIONS}
    runs["reference (float64)"] = lambda: golden.reference(q, k, v, scale=scale)
    times = {}
    for name, fn in runs.items():
        samples = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        times[name] = statistics.median(samples)
        print(f"{name:>20}: {times[name]:.2f} s", flush=True)
    four = sum(times[p] for p in ("fp32", "fp16_fp32", "fp16", "pasa"))
    lines = [
        "# Golden model speed",
        "",
        f"Shape (B, N, S, D) = {SHAPE}, one core (OMP/OPENBLAS/MKL_NUM_THREADS=1), median of {args.repeat} runs.",
        f"Machine: {cpu_model()}, {platform.platform()}; Python {platform.python_version()}, NumPy {np.__version__}.",
        f"Date: {date.today().isoformat()}. Command: `python {' '.join(sys.argv)}`.",
        "",
        "| allocation | seconds |",
        "|---|---|",
        *[f"| {name} | {t:.2f} |" for name, t in times.items()],
        f"| **the paper's four (fp32, fp16_fp32, fp16, pasa)** | **{four:.2f}** |",
        "",
        "Most of the time goes to rounding float32 arrays to FP16 (`astype`), which every vector",
        "operation of an FP16 allocation does once.",
    ]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"four allocations: {four:.2f} s; wrote {args.out}")


if __name__ == "__main__":
    main()

"""Cases for the CPU-debug check (scripts/cpu_debug_check.sh): writes each case's inputs, runs the kernel
built in CPU-debug mode, and compares its output with the golden model (pasa_npu.golden) and float64.

    python scripts/cpu_debug/compare.py EXE WORK_DIR
Exit 0 when every case passes, 1 otherwise (one line per case either way).
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np

from pasa_npu import golden, metrics

# (B, N, NKV, S1, S2, D, precision): full and tail blocks, GQA, both allocations.
CASES = [
    (1, 2, 2, 128, 128, 64, "pasa"),
    (1, 2, 1, 200, 300, 128, "pasa"),
    (2, 4, 2, 130, 257, 64, "pasa_fp32"),
    (1, 8, 2, 256, 1000, 128, "pasa_fp32"),
]


def run_case(exe: Path, work: Path, case) -> str | None:
    b, n, nkv, s1, s2, d, precision = case
    rng = np.random.default_rng(s1 * 7 + s2)
    q = rng.standard_normal((b, n, s1, d)).astype(np.float16)
    k = rng.standard_normal((b, nkv, s2, d)).astype(np.float16)
    v = rng.standard_normal((b, nkv, s2, d)).astype(np.float16)
    work.mkdir(parents=True, exist_ok=True)
    (work / "args.txt").write_text(f"{b} {n} {nkv} {s1} {s2} {d} {precision}\n")
    for name, x in (("q", q), ("k", k), ("v", v)):
        x.tofile(work / f"{name}.bin")
    res = subprocess.run([str(exe), str(work)], capture_output=True, text=True)
    if res.returncode != 0:
        return f"the kernel failed (exit {res.returncode}): {res.stderr.strip()[-2000:]}"
    out = np.fromfile(work / "out.bin", np.float16).reshape(b, n, s1, d)
    lse = np.fromfile(work / "lse.bin", np.float32).reshape(b, n, s1)
    scale = 1.0 / math.sqrt(d)
    bq = int((work / "block_q.txt").read_text())
    g_out, g_lse = golden.attention(q, k, v, precision=precision, scale=scale, block_q=bq)
    ref_out, _ = golden.reference(q, k, v, scale=scale)
    if not np.isfinite(out).all():
        return "non-finite outputs"
    k_err, g_err = metrics.rmse(out, ref_out), metrics.rmse(g_out, ref_out)
    if k_err > 1.1 * g_err:
        return f"RMSE to float64 {k_err:.3e} > 1.1 x the golden model's {g_err:.3e}"
    if not np.allclose(lse, g_lse, rtol=1e-3, atol=1e-3):
        return f"lse differs from the golden model by up to {np.abs(lse - g_lse).max():.3e}"
    return None


def main(argv) -> int:
    exe, work = Path(argv[1]), Path(argv[2])
    failed = 0
    for i, case in enumerate(CASES):
        err = run_case(exe, work / f"case{i}", case)
        print(f"cpu_debug_check: case {case}: {'ok' if err is None else 'FAILED: ' + err}")
        failed += err is not None
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""Host time of ``pasa_npu.fused_attention`` against another version of the package (CUDA).

The time to issue 1000 back-to-back calls with no synchronisation, the minimum of 9 repeats, µs per call:
for this checkout's package a repeated call (planned, docs/fia.md) and the first call of a signature (the
plans emptied before each call), for the other package its plain call, and SDPA beside each. The two packages
run in fresh processes, alternating, ``--rounds`` times, because the GPU machines' host speed moves between
runs. Make the other package with ``git archive REV python | tar -x -C DIR`` (its compiled host-model module
is not needed):

    PYTHONPATH=python python3 scripts/bench_call_ab.py --other DIR/python
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

def _host(fn) -> float:
    """Host µs per call: the minimum over 9 repeats of issuing 1000 back-to-back calls, after 30."""
    from bench_call import _per_call

    return round(_per_call(fn, 1000, 9, until_done=False, warmup=30, best=True), 1)


def _measure(which: str) -> None:
    """One process's rows: ``which`` is "this" or "other" (the package first on sys.path)."""
    import torch
    import torch.nn.functional as F

    import pasa_npu
    from bench_call import SHAPES
    from pasa_npu import interface

    for name, (b, n, nkv, s1, s2, d) in SHAPES.items():
        q = torch.randn(b, n, s1, d, device="cuda", dtype=torch.float16)
        k = torch.randn(b, nkv, s2, d, device="cuda", dtype=torch.float16)
        v = torch.randn_like(k)
        sdpa = _host(lambda: F.scaled_dot_product_attention(q, k, v, scale=d ** -0.5, enable_gqa=True))
        for precision in ("pasa_rs", "fp32"):
            kw = dict(num_heads=n, num_key_value_heads=nkv, input_layout="BNSD", scale=d ** -0.5, precision=precision)

            def call(kw=kw):
                return pasa_npu.fused_attention(q, k, v, **kw)

            if which == "other":
                print(f"| {name} | {precision} | {sdpa} | other | {_host(call)} | – |", flush=True)
                continue

            def first_of_signature(kw=kw):
                interface._PLANS.clear()
                return pasa_npu.fused_attention(q, k, v, **kw)

            print(f"| {name} | {precision} | {sdpa} | this | {_host(call)} | {_host(first_of_signature)} |",
                  flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other", type=Path, help="the other package's python/ folder (holding pasa_npu/)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--measure", choices=["this", "other"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure is not None:
        _measure(args.measure)
        return 0
    if args.other is None or not (args.other / "pasa_npu").is_dir():
        print("--other must be a folder holding another version's pasa_npu package", file=sys.stderr)
        return 2
    here = Path(__file__).resolve().parents[1] / "python"
    print("| shape | precision | SDPA | package | call (planned, for this one) | first call of a signature |")
    print("|---|---|---|---|---|---|")
    for _ in range(args.rounds):
        for which, path in (("other", args.other), ("this", here)):
            subprocess.run([sys.executable, __file__, "--measure", which], check=True,
                           env={**os.environ, "PYTHONPATH": str(path)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

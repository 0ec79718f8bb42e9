"""Where the Gluon Hopper kernel starts to pay: the wall time of a call on either kernel over a ladder of prefill sizes,
the measurement behind ``pasa_npu.backends.triton.GLUON_MIN_WORK``.

For each shape and precision, the public call (``pasa_npu.fused_attention``, BNSD, no lse) with the rule's threshold
set to send it to one kernel or the other (and the call's plans dropped, so that the next call plans again), timed as
the eager wall time of back-to-back calls with one sync at the end (what a caller pays, host time included) and as
CUDA-graph replays (the GPU's time alone), in rounds that alternate the kernels. The work of a shape is
B·N·S1·S2·D, the quantity the rule compares.

    PYTHONPATH=python python3 scripts/bench_gluon_threshold.py --out DIR

writes ``threshold.json`` into DIR and prints a table; needs an sm_90 GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_call import _gluon_rule_sends, _graph_per_call, _median, _per_call  # noqa: E402
from bench_gpu import env_info  # noqa: E402

import pasa_npu  # noqa: E402
from pasa_npu.backends import triton as tb  # noqa: E402

#: (B, N, Nkv, S1, S2, D): short prefills of one sequence around the threshold, and a few batches of them.
SHAPES = [(1, 32, 8, s, s, 128) for s in (256, 512, 768, 1024, 1536, 2048)] + \
    [(1, 32, 32, s, s, 64) for s in (1024, 1448, 2048)] + [(1, 16, 16, s, s, 256) for s in (1024, 1448, 2048, 4096)] + \
    [(4, 32, 8, 512, 512, 128), (8, 32, 8, 1024, 1024, 128)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--precisions", default="fp32_frame,fp32")
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    if torch.cuda.get_device_capability() != (9, 0):
        print("bench_gluon_threshold.py needs an sm_90 GPU", file=sys.stderr)
        return 2
    res = {"env": env_info(), "min_work": tb.GLUON_MIN_WORK, "rows": []}
    gen = torch.Generator(device="cuda").manual_seed(0)
    for b, n, nkv, s1, s2, d in SHAPES:
        q = torch.randn(b, n, s1, d, device="cuda", generator=gen).half()
        k, v = (torch.randn(b, nkv, s2, d, device="cuda", generator=gen).half() for _ in range(2))
        for precision in args.precisions.split(","):
            def call():
                return pasa_npu.fused_attention(q, k, v, num_heads=n, num_key_value_heads=nkv, input_layout="BNSD",
                                                scale=d ** -0.5, precision=precision)

            wall, graph = {"classic": [], "gluon": []}, {}
            for _ in range(args.repeats):
                for kernel in wall:
                    with _gluon_rule_sends(kernel):
                        wall[kernel].append(_per_call(call, args.calls, 1, until_done=True))
            for kernel in wall:
                with _gluon_rule_sends(kernel):
                    graph[kernel] = _graph_per_call(call, args.calls, args.repeats)
            wall = {kernel: _median(ts) for kernel, ts in wall.items()}
            row = {"shape": (b, n, nkv, s1, s2, d), "precision": precision, "log2_work": math.log2(b * n * s1 * s2 * d),
                   "wall_us": wall, "graph_us": graph}
            res["rows"].append(row)
            print(f"| {row['shape']} | {precision} | {row['log2_work']:.1f} | {wall['classic']:.1f} | "
                  f"{wall['gluon']:.1f} | {graph['classic']:.1f} | {graph['gluon']:.1f} |", flush=True)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "threshold.json").write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

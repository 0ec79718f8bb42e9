"""TND prefill (packed sequences of unequal lengths) through the public call on either kernel: the Gluon kernel's one
launch over the call's tile table against the classic kernel's launch per sequence.

For each shape and precision, ``pasa_npu.fused_attention`` with ``input_layout="TND"`` and the rule's threshold set
to send the call to one kernel or the other, timed as the eager wall time of back-to-back calls with one sync at the
end (what a caller pays, host time included; a dense TND call copies its tile table from the host, so it is not
captured in a CUDA graph), in rounds that alternate the kernels; the two kernels' outputs and lse are compared (equal
bit for bit, or the script fails). TFLOP/s count 4·N·D multiply-adds per kept (query, key) pair.

    PYTHONPATH=python python3 scripts/bench_gluon_tnd.py --out DIR

writes ``tnd.json`` into DIR and prints a table; needs an sm_90 GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_call import _gluon_rule_sends, _median, _per_call  # noqa: E402
from bench_gpu import env_info  # noqa: E402

import pasa_npu  # noqa: E402

#: name -> (N, Nkv, D, query rows of each sequence, causal): a serving prefill batch of mixed lengths (GQA), the same
#: at D 64 and 256, and eight equal sequences.
MIXED = [3000, 1200, 517, 2048, 90, 4000, 800, 1500]
SHAPES = {
    "mixed_d128_causal": (32, 8, 128, MIXED, True),
    "mixed_d128": (32, 8, 128, MIXED, False),
    "mixed_d64_causal": (32, 32, 64, MIXED, True),
    "mixed_d256_causal": (16, 16, 256, MIXED, True),
    "8x2048_d128_causal": (32, 8, 128, [2048] * 8, True),
}
#: FIA's compressed causal mask (sparse_mode 3 takes it).
CAUSAL = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--precisions", default="fp32_frame,fp32")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    if torch.cuda.get_device_capability() != (9, 0):
        print("bench_gluon_tnd.py needs an sm_90 GPU", file=sys.stderr)
        return 2
    res = {"env": env_info(), "rows": []}
    gen = torch.Generator(device="cuda").manual_seed(0)
    mask = CAUSAL.cuda()
    print("| shape | precision | classic µs | gluon µs | classic TFLOP/s | gluon TFLOP/s |")
    for name, (n, nkv, d, lens, causal) in SHAPES.items():
        t = sum(lens)
        q = torch.randn(t, n, d, device="cuda", generator=gen).half()
        k, v = (torch.randn(t, nkv, d, device="cuda", generator=gen).half() for _ in range(2))
        cum = torch.tensor(lens).cumsum(0).tolist()
        pairs = sum(s * (s + 1) // 2 if causal else s * s for s in lens)
        options = dict(sparse_mode=3, atten_mask=mask) if causal else {}
        for precision in args.precisions.split(","):
            def call():
                return pasa_npu.fused_attention(q, k, v, num_heads=n, num_key_value_heads=nkv, input_layout="TND",
                                                actual_seq_lengths=cum, actual_seq_lengths_kv=cum, scale=d ** -0.5,
                                                precision=precision, softmax_lse_flag=True, **options)

            wall, results = {"classic": [], "gluon": []}, {}
            for _ in range(args.repeats):
                for kernel in wall:
                    with _gluon_rule_sends(kernel):
                        results[kernel] = call()
                        wall[kernel].append(_per_call(call, args.calls, 1, until_done=True, warmup=3))
            same = all(torch.equal(a, b) for a, b in zip(results["classic"], results["gluon"]))
            wall = {kernel: _median(ts) for kernel, ts in wall.items()}
            tflops = {kernel: 4 * n * d * pairs / us / 1e6 for kernel, us in wall.items()}
            row = {"shape": name, "heads": (n, nkv), "d": d, "lens": lens, "causal": causal, "precision": precision,
                   "wall_us": wall, "tflops": tflops, "equal": same}
            res["rows"].append(row)
            print(f"| {name} | {precision} | {wall['classic']:.0f} | {wall['gluon']:.0f} | {tflops['classic']:.0f} | "
                  f"{tflops['gluon']:.0f} |{'' if same else ' OUTPUTS DIFFER'}", flush=True)
            if not same:
                return 1
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "tnd.json").write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

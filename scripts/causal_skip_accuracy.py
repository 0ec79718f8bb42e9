"""Accuracy of the PASA allocations on causal hard inputs, walking every KV block or only those the band shows.

Usage: python scripts/causal_skip_accuracy.py [--seeds 3] [--long-keys 8192] [--window W] [--cases DIST ...]

Square causal calls (S1 = S2) of the hard sweep's inputs (pasa_npu.accuracy.draw_hard): bias (Q, K ~
N(10, 1)), resonance at both phases and drift on 1000 keys, and the near-equal keys of "long" on
--long-keys keys. Each allocation runs twice on the golden model: with the causal rule as a plain mask,
so that every query tile walks every KV block (the golden model's definition before block skipping),
and as the band, so that a tile walks only the blocks it sees (the definition now, the kernels'). With
--window W the band is a sliding window, query i keeping keys i − W < j <= i, whose later tiles skip
their first KV blocks (causal alone hides only blocks after a tile's last live one). A tile
is the AscendC kernel's blockQ rows for the allocation at D = 128. Printed per case and allocation: the
relative RMSE as a ratio to the fp32 allocation's on the same draw (median and worst over the draws),
the worst |lse − lse64|, for both, and the fraction of output elements the two differ in. Everything is
the golden model's emulation on the CPU.
"""

import argparse

import numpy as np

from pasa_npu import golden, metrics, npu_host_model
from pasa_npu.accuracy import Case, case_seed, draw_hard

CASES = (Case("causal", 10, 1), Case("resonance", 0, 34), Case("resonance", 180, 34), Case("drift", 10, 1),
         Case("long", 0, 1))
PRECISIONS = ("fp16_fp32", "pasa", "pasa_fp32", "pasa_rs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--long-keys", type=int, default=8192)
    ap.add_argument("--window", type=int, default=0, help="keys of a sliding-window band (0: causal alone)")
    ap.add_argument("--cases", nargs="+", default=sorted({c.dist for c in CASES}), metavar="DIST",
                    help="the cases to run, by distribution name")
    args = ap.parse_args()
    band = (None, 0) if args.window == 0 else (1 - args.window, 0)
    one = np.zeros((1, 1, 1, 128), np.float16)
    block_q = {p: npu_host_model.tiling(one, one, one, num_heads=1, input_layout="BNSD", precision=p)["blockQ"]
               for p in PRECISIONS}
    print(f"ratio = RMSE / fp32's RMSE on the same draw, median [worst] over {args.seeds} draws; lse = worst "
          f"|lse - lse64|; differing = fraction of outputs that differ; block_q {block_q}")
    print("| case | S | allocation | every block: ratio | lse | visited blocks: ratio | lse | differing |")
    print("|---|---|---|---|---|---|---|---|")
    for case in (c for c in CASES if c.dist in args.cases):
        s = args.long_keys if case.dist == "long" else 1000
        res = {p: {"every": ([], []), "band": ([], [])} for p in PRECISIONS}
        differ = {p: [] for p in PRECISIONS}
        for rep in range(args.seeds):
            rng = np.random.default_rng(case_seed(0, case, rep))
            q, k, v, call = draw_hard(case, rng, s1=s, s2=s)
            scale = call["scale"]
            rel = np.arange(s)[None, :] - np.arange(s)[:, None]
            hidden = (rel > band[1]) | (False if band[0] is None else rel < band[0])
            ref, ref_lse = golden.reference(q.astype(np.float16), k.astype(np.float16), v.astype(np.float16),
                                            scale=scale, band=band)
            base = metrics.rmse(golden.attention(q, k, v, precision="fp32", scale=scale, band=band)[0], ref)
            for p in PRECISIONS:
                outs = []
                for how, extra in (("every", dict(mask=hidden)), ("band", dict(band=band))):
                    out, lse = golden.attention(q, k, v, precision=p, scale=scale, block_q=block_q[p], **extra)
                    res[p][how][0].append(metrics.rmse(out, ref) / base)
                    res[p][how][1].append(float(np.abs(lse.astype(np.float64) - ref_lse).max()))
                    outs.append(out)
                differ[p].append(float(np.mean(outs[0] != outs[1])))
        for p in PRECISIONS:
            cells = []
            for how in ("every", "band"):
                ratios, lses = res[p][how]
                cells += [f"{np.median(ratios):.4g} [{max(ratios):.4g}]", f"{max(lses):.3e}"]
            cells.append(f"{max(differ[p]):.2%}")
            print(f"| {case.dist} ({case.x0:g}, {case.am:g}) | {s} | {p} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()

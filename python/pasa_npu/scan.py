"""``pasa-npu scan``: does a transformers model's attention overflow in FP16, and does PASA help?

The scanner runs a prompt through a local transformers model with an attention function that
records every layer's query, key, value, mask and scale and then computes attention as SDPA does,
so the model's own output is unchanged. For each layer and head it reports (docs/integrations/scan.md
defines every column):

* ``max_qk``: max |Q·Kᵀ| over the attended (unmasked) entries, the unscaled score that the fp16 and
  fp16_fp32 allocations round to FP16 out of the matrix unit; ``max_qk_scaled`` = max_qk·scale;
* ``max_shifted``: max |S'| with S' = Q·K'ᵀ and K'_j = M·K_j, each KV block shifted by PASA's
  M = (I − β/n·J)·scale exactly as the kernels build it (M's entries rounded to FP16 by
  :func:`pasa_npu.beta.shift_entries`, β = :func:`pasa_npu.beta.default_beta`, a tail block padded
  with copies of its last key as in :mod:`pasa_npu.blockwise`), over every column;
* ``max_correction``: the largest of PASA's recovery terms β/(1−β)·(S̄'_j − F_j) and
  β/(1−β)·(F_{j−1} − F_j), which all-FP16 ``pasa`` holds in FP16;
* ``k_bias``: ‖mean_j K_j‖ / sqrt(mean_j ‖K_j − mean K‖²), the bias of K along the sequence
  relative to its spread;
* ``resonance``: cos(mean_i Q_i, mean_j K_j) along the head dimension, the phase alignment of the
  paper's §3.3.2 (+1: in phase, large positive scores; −1: 180° out of phase, large negative);
* a verdict per allocation of :mod:`pasa_npu.precision`, derived from what its definition rounds
  to FP16: does such a value reach 65520, the smallest magnitude that rounds to Inf in FP16, and
  what follows? ``"nan"``: a +Inf score (the row maximum becomes Inf and S − max NaN), or any Inf in
  PASA's S' or corrections (its block mean becomes ±Inf); the output rows turn NaN. ``"-inf"``: only
  scores below −65520 overflow (FP16 S unshifted): those keys get weight 0, silently; harmless where
  they had no weight anyway, wrong where they had (a row whose every key overflows gets output 0).
  ``"ok"``: nothing overflows. Criteria: FP16 S unshifted (fp16_fp32, fp16) the attended Q·Kᵀ, and
  Q·Kᵀ·scale where the state is FP16 too (fp16); FP16 S' (pasa_fp32, pasa) S', and the corrections
  where the state is FP16 too (pasa); an ``overflow_free`` allocation none: fp32 and fp32_frame (the
  default) hold S in FP32 and round to FP16 only P, which their row maximum or frame keeps at most 1
  or e^FRAME_UP ≈ 22 026, and the output, a weighted mean of V; pasa_rs recomputes with FP32 scores
  any block whose S' would overflow. Only inputs beyond FP16's range make them "nan".

All statistics are computed in float64 on the FP16-rounded Q, K, V that the kernels would receive.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from .accuracy import json_safe
from .beta import default_beta, ideal_invariance, shift_entries
from .precision import ALLOCATIONS, PRECISIONS, Allocation

__all__ = ["Capture", "HeadStats", "capture", "scan_capture", "scan_model", "verify", "format_table",
           "write_json", "write_heatmap", "overflow_verdict", "FP16_INF_AT", "VERDICT_PRECISIONS"]

#: The smallest magnitude that rounds to Inf in FP16 (round to nearest even past 65504).
FP16_INF_AT = 65520.0
FP16_MAX = 65504.0
#: One verdict per allocation, in precision.py's order.
VERDICT_PRECISIONS = PRECISIONS
_SCAN_NAME = "pasa_scan"


@dataclass
class Capture:
    """One attention call: q (B, N, S1, D), k/v (B, Nkv, S2, D) in the model's dtype, ``keep`` a
    bool mask (True = attended) broadcastable to (B, N, S1, S2) or None, and the scale."""

    layer: int
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    keep: torch.Tensor | None
    scale: float


@dataclass
class HeadStats:
    layer: int
    head: int
    max_qk: float
    max_qk_scaled: float
    max_shifted: float
    max_correction: float
    k_bias: float
    resonance: float
    overflow: dict[str, str] = field(default_factory=dict)  # precision -> "ok" | "nan" | "-inf"


# ------------------------------------------------------------------------------------------------
# per-head statistics: q (N, S1, D), k (N, S2, D) float64 (k already expanded to the query heads),
# keep (N or 1, S1, S2) bool or None. Each returns one value per head.
# ------------------------------------------------------------------------------------------------

def score_range(q: torch.Tensor, k: torch.Tensor, keep: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(max, min) of Q·Kᵀ over the attended entries of each head (0 where a head attends to nothing)."""
    s = (q @ k.transpose(-1, -2)).float().double()  # the matrix unit's FP32 result
    if keep is not None:
        s = torch.where(keep, s, torch.zeros((), dtype=s.dtype))
    return s.amax(dim=(-1, -2)), s.amin(dim=(-1, -2))


def shifted_blocks(k: torch.Tensor, beta: float, block_kv: int, scale: float) -> list[torch.Tensor]:
    """K'_j = M·K_j for each KV block, M = (I − β/n·J)·scale with FP16 entries, K' rounded to FP16
    (what the kernels' first GEMM writes). A tail block is padded to ``block_kv`` rows with copies of
    its last key before the shift, as :mod:`pasa_npu.blockwise` does."""
    diag, off = shift_entries(beta, block_kv, "float16", scale)
    m = torch.full((block_kv, block_kv), off, dtype=torch.float64)
    m.fill_diagonal_(diag)
    out = []
    for c0 in range(0, k.shape[-2], block_kv):
        kj = k[..., c0:c0 + block_kv, :]
        n_j = kj.shape[-2]
        if n_j < block_kv:
            kj = kj[..., list(range(n_j)) + [n_j - 1] * (block_kv - n_j), :]
        out.append(_fp16(m @ kj))
    return out


def shifted_scores(q: torch.Tensor, k_shift: list[torch.Tensor]) -> list[torch.Tensor]:
    """S'_j = Q·K'_jᵀ per block as the matrix unit writes it to FP32 (over every column, padded
    copies included: PASA's block mean uses them all before any mask is applied)."""
    return [(q @ kj.transpose(-1, -2)).float().double() for kj in k_shift]


def max_correction(s_blocks: list[torch.Tensor], beta: float) -> torch.Tensor:
    """The largest |β/(1−β)·(S̄'_j − F_j)| and |β/(1−β)·(F_{j−1} − F_j)| of each head, with F the
    running (Welford) mean of the block means S̄'_j: the recovery terms of Algorithm 1's step 5."""
    inva = ideal_invariance(beta)
    f = None
    worst = torch.zeros(s_blocks[0].shape[:-2], dtype=torch.float64)
    for j, s in enumerate(s_blocks, start=1):
        mean = s.mean(dim=-1)
        f_new = mean if f is None else f + (mean - f) / j
        terms = [(inva * (mean - f_new)).abs()]
        if f is not None:
            terms.append((inva * (f - f_new)).abs())
        for t in terms:
            worst = torch.maximum(worst, t.amax(dim=-1))
        f = f_new
    return worst


def k_bias(k: torch.Tensor, keep_keys: torch.Tensor | None = None) -> torch.Tensor:
    """‖mean_j K_j‖ / sqrt(mean_j ‖K_j − mean K‖²) per head, over the keys that some query attends."""
    if keep_keys is not None:
        k = k[..., keep_keys, :]
    mean = k.mean(dim=-2)
    spread = ((k - mean[..., None, :]) ** 2).sum(-1).mean(-1).sqrt()
    return mean.norm(dim=-1) / spread.clamp_min(torch.finfo(torch.float64).tiny)


def resonance(q: torch.Tensor, k: torch.Tensor, keep_keys: torch.Tensor | None = None) -> torch.Tensor:
    """cos(mean_i Q_i, mean_j K_j) per head: the phase alignment of Q and K along the head dim."""
    if keep_keys is not None:
        k = k[..., keep_keys, :]
    return torch.nn.functional.cosine_similarity(q.mean(dim=-2), k.mean(dim=-2), dim=-1)


def overflow_verdict(alloc: Allocation, qk_max: float, qk_min: float, scale: float, max_shifted: float,
                     max_corr: float) -> str:
    """"nan", "-inf" or "ok" for one allocation, from the values its definition rounds to FP16 (the
    criteria of the module docstring)."""
    if alloc.overflow_free:  # FP32 scores, or an FP32 recompute of a block whose S' overflows
        return "ok"
    if alloc.shifted:  # FP16 S', and the corrections in an FP16 state
        peak = max(max_shifted, max_corr) if alloc.state == "float16" else max_shifted
        return "nan" if peak >= FP16_INF_AT else "ok"
    # FP16 S = Q·Kᵀ out of the matrix unit; an FP16 state also holds the scaled scores
    factor = max(1.0, scale) if alloc.state == "float16" else 1.0
    if qk_max * factor >= FP16_INF_AT:
        return "nan"
    return "-inf" if -qk_min * factor >= FP16_INF_AT else "ok"


def overflow_verdicts(qk_max: float, qk_min: float, scale: float, max_shifted: float,
                      max_corr: float) -> dict[str, str]:
    """:func:`overflow_verdict` of every allocation in :data:`VERDICT_PRECISIONS`."""
    return {p: overflow_verdict(ALLOCATIONS[p], qk_max, qk_min, scale, max_shifted, max_corr)
            for p in VERDICT_PRECISIONS}


def _fp16(x: torch.Tensor) -> torch.Tensor:
    """x rounded to FP16 (through FP32, as a matrix unit's FP32 result is converted), as float64."""
    return x.float().half().double()


# ------------------------------------------------------------------------------------------------
# one capture -> one HeadStats per (batch entry 0's) head
# ------------------------------------------------------------------------------------------------

def scan_capture(cap: Capture, *, beta: float | None = None, block_kv: int = 128) -> list[HeadStats]:
    """The statistics and verdicts of every head of one captured attention call (batch entry 0)."""
    q, k = cap.q[0].double(), cap.k[0].double()
    n, nkv = q.shape[0], k.shape[0]
    k = k.repeat_interleave(n // nkv, dim=0)  # statistics per query head; the kernels share K'
    in_range = max(q.abs().max().item(), k.abs().max().item(), cap.v.abs().max().item()) <= FP16_MAX
    if in_range:
        q, k = _fp16(q), _fp16(k)
    # else: the inputs themselves are beyond FP16 (fused_attention refuses them); the statistics
    # stay in float64 and every FP16 allocation is reported as overflowing.
    keep = None if cap.keep is None else cap.keep[0].expand(n, -1, -1)
    keep_keys = None if cap.keep is None else cap.keep[0].reshape(-1, cap.keep.shape[-1]).any(0)
    b = default_beta(block_kv, cap.scale) if beta is None else beta
    s_blocks = shifted_scores(q, shifted_blocks(k, b, block_kv, cap.scale))
    qk_max, qk_min = score_range(q, k, keep)
    qk = torch.maximum(qk_max, -qk_min)
    shifted = torch.stack([s.abs().amax(dim=(-1, -2)) for s in s_blocks]).amax(0)
    corr = max_correction(s_blocks, b)
    kb, res = k_bias(k, keep_keys), resonance(q, k, keep_keys)
    rows = []
    for h in range(n):
        row = HeadStats(cap.layer, h, qk[h].item(), qk[h].item() * cap.scale, shifted[h].item(), corr[h].item(),
                        kb[h].item(), res[h].item())
        row.overflow = overflow_verdicts(qk_max[h].item(), qk_min[h].item(), cap.scale, row.max_shifted,
                                         row.max_correction) if in_range else {p: "nan" for p in VERDICT_PRECISIONS}
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------------
# capturing a transformers model's attention calls
# ------------------------------------------------------------------------------------------------

def capture(model, inputs: dict) -> list[Capture]:
    """Run ``model(**inputs)`` once with a recording attention function; return one Capture per
    attention call, in call order. The model's attention implementation is restored afterwards."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface

    from .integrations.transformers import pasa_mask

    records: list[Capture] = []

    def recording_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        keep = attention_mask
        if keep is not None and keep.dtype != torch.bool:
            keep = keep == 0  # an additive mask passed through unchanged by the model
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        layer = getattr(module, "layer_idx", None)
        records.append(Capture(len(records) if layer is None else int(layer), query.detach().cpu(),
                               key.detach().cpu(), value.detach().cpu(),
                               None if keep is None else keep.detach().cpu(), float(scale)))
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)

    AttentionInterface.register(_SCAN_NAME, recording_attention)
    AttentionMaskInterface.register(_SCAN_NAME, pasa_mask)
    previous = model.config._attn_implementation
    model.set_attn_implementation(_SCAN_NAME)
    try:
        with torch.no_grad():
            model(**inputs)
    finally:
        model.set_attn_implementation(previous)
    return records


def scan_model(model, inputs: dict, *, beta: float | None = None, block_kv: int = 128
               ) -> tuple[list[HeadStats], list[Capture]]:
    """Capture every attention call of ``model(**inputs)`` and scan each; returns (rows, captures)."""
    caps = capture(model, inputs)
    rows = [r for c in caps for r in scan_capture(c, beta=beta, block_kv=block_kv)]
    return rows, caps


def verify(caps: list[Capture], precisions=VERDICT_PRECISIONS, *, beta: float | None = None,
           block_kv: int = 128) -> dict[tuple[int, int, str], bool]:
    """Run each allocation on the captured tensors through :func:`pasa_npu.fused_attention`;
    returns {(layer, head, precision): whether that head's output holds NaN or Inf}. Captures whose
    inputs are beyond FP16's range (refused by fused_attention) count as non-finite."""
    from .integrations import attend, fia_mask, PasaSettings

    result = {}
    for c in caps:
        n = c.q.shape[1]
        for p in precisions:
            settings = PasaSettings(precision=p, beta=beta, block_kv=block_kv, safety_net=False)
            try:
                out = attend(c.q[:1].float(), c.k[:1].float(), c.v[:1].float(), fia_mask(
                    None if c.keep is None else c.keep[:1]), c.scale, settings)
                bad = [not bool(torch.isfinite(out[0, :, h]).all()) for h in range(n)]
            except ValueError:
                bad = [True] * n
            for h in range(n):
                result[(c.layer, h, p)] = bad[h]
    return result


# ------------------------------------------------------------------------------------------------
# reporting
# ------------------------------------------------------------------------------------------------

_LABEL = {"ok": "ok", "nan": "NaN", "-inf": "-Inf"}
_WIDTH = max(len(p) for p in VERDICT_PRECISIONS)  # of a verdict column


def _count(rows: list[HeadStats], precision: str, verdict: str) -> int:
    return sum(r.overflow[precision] == verdict for r in rows)


def format_table(rows: list[HeadStats]) -> str:
    head = (f"{'layer':>5} {'head':>4} {'max|QK^T|':>11} {'*scale':>10} {'max|S_pasa|':>11} {'max corr':>9} "
            f"{'K bias':>7} {'reson.':>7}  " + " ".join(f"{p:>{_WIDTH}}" for p in VERDICT_PRECISIONS))
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.layer:>5} {r.head:>4} {r.max_qk:>11.4g} {r.max_qk_scaled:>10.4g} {r.max_shifted:>11.4g} "
                     f"{r.max_correction:>9.3g} {r.k_bias:>7.3f} {r.resonance:>7.3f}  "
                     + " ".join(f"{_LABEL[r.overflow[p]]:>{_WIDTH}}" for p in VERDICT_PRECISIONS))
    n = len(rows)
    lines.append("heads that overflow (NaN / -Inf): " + ", ".join(
        f"{p} {_count(rows, p, 'nan')}/{_count(rows, p, '-inf')} of {n}" for p in VERDICT_PRECISIONS))
    return "\n".join(lines)


def write_json(rows: list[HeadStats], path: Path, meta: dict) -> None:
    data = dict(meta, threshold=FP16_INF_AT, heads=[asdict(r) for r in rows],
                overflowing_heads={p: {v: _count(rows, p, v) for v in ("nan", "-inf")} for p in VERDICT_PRECISIONS})
    Path(path).write_text(json.dumps(json_safe(data), indent=1, allow_nan=False))


def write_heatmap(rows: list[HeadStats], path: Path, title: str = "") -> None:
    """Two layer x head maps of log10 of max|Q·Kᵀ| and max|S'|; hatched cells overflow FP16."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    layers = sorted({r.layer for r in rows})
    heads = max(r.head for r in rows) + 1
    before = np.full((len(layers), heads), np.nan)
    after = np.full_like(before, np.nan)
    for r in rows:
        i = layers.index(r.layer)
        before[i, r.head] = math.log10(max(r.max_qk, 1e-3))
        after[i, r.head] = math.log10(max(r.max_shifted, 1e-3))
    vmax = max(np.nanmax(before), np.nanmax(after), math.log10(FP16_INF_AT))
    vmin = min(np.nanmin(before), np.nanmin(after))
    fig, axes = plt.subplots(1, 2, figsize=(4 + 0.5 * heads, 1.5 + 0.45 * len(layers)), constrained_layout=True)
    for ax, data, name in ((axes[0], before, "max |Q·Kᵀ| (fp16 / fp16_fp32 S)"), (axes[1], after, "max |S'| (PASA)")):
        im = ax.imshow(data, vmin=vmin, vmax=vmax, cmap="viridis", aspect="auto")
        over = data >= math.log10(FP16_INF_AT)
        for i, j in zip(*np.nonzero(over)):
            ax.text(j, i, "X", ha="center", va="center", color="red", fontsize=9, fontweight="bold")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_yticks(range(len(layers)), [str(x) for x in layers])
    cb = fig.colorbar(im, ax=axes, shrink=0.9)
    cb.set_label("log10 (X: ≥ 65520, Inf in FP16)")
    if title:
        fig.suptitle(title, fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)

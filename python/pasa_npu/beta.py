"""PASA's optimal-accuracy condition for the shift parameter β (paper §2.3, Appendices A-C).

The shifting matrix is M = (I − β/n·J)·scale. Its two distinct entries are rounded separately to
the input type, so the matrix the hardware multiplies with is a·I − b·J (after dividing out the
scale) with a ≠ 1 and b ≠ β/n in general. PASA recovers each block's mean score with the
coefficient β/(1−β) (the *ideal invariance*, ``Inva``); the rounded matrix actually calls for

    f(β) = b·n / (a·(a − b·n)) + (1 − a)/a          (the *practical invariance*, ``Inva_r``, eq. 20)

The optimal β is the fixed point β/(1−β) = f(β), found by the iteration β ← f(β)/(1 + f(β)) in
float64 (eq. 22). With ``scale=None`` this models the paper's M = I − β/n·J and reproduces its
Table 3; with a scale it models the scaled M that our kernels build (the scale folded into M, so
S' = Q·K'ᵀ comes out of the matrix unit already scaled and shifted, as in the authors' reference).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

DTYPES = ("float16", "bfloat16")
#: The paper's start values for Table 3: 0.9, 1−2⁻⁴, 1−2⁻⁵, 1−2⁻⁶, 0.99, 0.999.
TABLE3_START = (0.9, 1 - 2**-4, 1 - 2**-5, 1 - 2**-6, 0.99, 0.999)
#: The start value the paper adopts for its validation (β = 0.984497 at n = 128, FP16).
DEFAULT_START = 1 - 2**-6


def round_to(x, dtype: str) -> np.ndarray:
    """Round float64 values to ``dtype`` (float16 or bfloat16, round-to-nearest-even), as float64."""
    x = np.asarray(x, dtype=np.float64)
    if dtype == "float16":
        return x.astype(np.float16).astype(np.float64)
    if dtype == "bfloat16":
        # float64 -> float32 is exact for every value a bfloat16 rounding can tell apart except
        # double-rounding ties, which cannot occur for the entries 1 − β/n and β/n of interest
        # here; then round the float32 bit pattern to its top 16 bits, ties to even.
        bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)
    raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")


#: Per dtype: (largest finite value, smallest positive subnormal value).
_RANGE = {"float16": (65504.0, 2.0**-24), "bfloat16": ((2 - 2.0**-7) * 2.0**127, 2.0**-133)}
#: The off-diagonal β/n·scale must be at least this many steps of the smallest subnormal (6 bits).
_MIN_STEPS = 64


def scale_range(block_kv: int, dtype: str = "float16") -> tuple[float, float]:
    """The scales (lo, hi) for which M = (I − β/n·J)·scale can be stored in ``dtype``.

    Above hi, dtype's largest finite value, the diagonal (1 − β/n)·scale overflows to Inf. Below
    lo = n·64·(dtype's smallest subnormal), n·2⁻¹⁸ in float16, the off-diagonal β/n·scale is a
    subnormal of fewer than 6 significant bits, and the fixed point of the β solver moves far from
    the paper's β or leaves [0, 1) (singular M, negative β): in float16, for every power-of-two n up
    to 512, the solver converges to β in (0.86, 1) on all of [lo, hi] and fails at some scales
    below lo. For n = 128, lo = 2⁻¹¹ ≈ 4.9e-4, below muP's scale 1/D up to D = 2048.
    """
    _check_block_kv(block_kv)
    _check_dtype(dtype)
    hi, step = _RANGE[dtype]
    return block_kv * _MIN_STEPS * step, hi


def check_scale(scale: float | None, block_kv: int = 128, dtype: str = "float16") -> None:
    """Raise ValueError unless M = (I − β/n·J)·scale can be stored in ``dtype``: ``scale`` must be
    None (meaning 1, the paper's model) or within :func:`scale_range`."""
    lo, hi = scale_range(block_kv, dtype)
    if scale is not None and (isinstance(scale, bool)
                              or not isinstance(scale, (int, float, np.integer, np.floating))):
        raise TypeError(f"scale must be None or a real number, got {type(scale).__name__}")
    if not lo <= (1.0 if scale is None else float(scale)) <= hi:  # also rejects NaN
        raise ValueError(
            f"scale must be in [{lo:g}, {hi:g}] for the shifting matrix M = (I - beta/n*J)*scale with "
            f"block_kv n={block_kv} in {dtype}, got {scale!r} (None means 1): above {hi:g} M's diagonal "
            f"overflows {dtype}; below n*2**{int(np.log2(_MIN_STEPS * _RANGE[dtype][1]))} its off-diagonal "
            f"beta/n*scale is a {dtype} subnormal with too few bits for the beta solver")


def _check_block_kv(block_kv: int) -> None:
    if isinstance(block_kv, bool) or not isinstance(block_kv, (int, np.integer)) or block_kv < 1:
        raise ValueError(f"block_kv must be a positive integer, got {block_kv!r}")


def _check_dtype(dtype: str) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")


def shift_entries(beta: float, block_kv: int, dtype: str = "float16",
                  scale: float | None = None) -> tuple[float, float]:
    """The two entries of M = (I − β/n·J)·scale as the kernels store them: (diagonal, off-diagonal),
    each rounded to ``dtype``. ``scale=None`` means 1 (the paper's Table 3 model)."""
    if not 0.0 <= float(beta) < 1.0:
        raise ValueError(f"beta must be in [0, 1), got {beta!r}")
    check_scale(scale, block_kv, dtype)
    s = 1.0 if scale is None else float(scale)
    b = float(beta) / block_kv
    return float(round_to((1.0 - b) * s, dtype)), float(round_to(-b * s, dtype))


def ideal_invariance(beta: float) -> float:
    """Inva = β/(1−β): the mean-recovery coefficient of an exactly represented M."""
    if not 0.0 <= float(beta) < 1.0:
        raise ValueError(f"beta must be in [0, 1), got {beta!r}")
    return float(beta) / (1.0 - float(beta))


def practical_invariance(beta: float, block_kv: int = 128, dtype: str = "float16",
                         scale: float | None = None) -> float:
    """Inva_r = f(β) of eq. 20: the mean-recovery coefficient of M with its entries rounded."""
    diag, off = shift_entries(beta, block_kv, dtype, scale)
    s = 1.0 if scale is None else float(scale)
    b = -off / s
    a = diag / s + b
    n = block_kv
    if a - b * n <= 0.0:
        raise ValueError(f"M rounded to {dtype} is singular for beta={beta!r}, block_kv={block_kv} "
                         f"(its effective beta is >= 1): the mean cannot be recovered")
    return b * n / (a * (a - b * n)) + (1.0 - a) / a


def optimal_beta(beta0: float, block_kv: int = 128, dtype: str = "float16",
                 scale: float | None = None, *, tol: float = 1e-8, max_iter: int = 1000) -> float:
    """Solve β/(1−β) = f(β) by the fixed-point iteration of eq. 22, starting from ``beta0``.

    The iteration runs in float64; only M's entries are rounded (to ``dtype``), exactly as the
    kernels round them. Raises ValueError if it has not converged after ``max_iter`` steps.
    """
    beta = float(beta0)
    for _ in range(max_iter):
        inv = practical_invariance(beta, block_kv, dtype, scale)
        new = inv / (1.0 + inv)
        converged = abs(new - beta) <= tol * abs(beta)
        beta = new
        if converged:
            return beta
    raise ValueError(f"optimal_beta did not converge from beta0={beta0!r} in {max_iter} steps")


@lru_cache(maxsize=None)
def default_beta(block_kv: int = 128, scale: float | None = None) -> float:
    """The β every backend uses when none is given: the FP16 optimum from the paper's start
    value 1 − 2⁻⁶, for the M (block length and scale) the kernels actually build."""
    return optimal_beta(DEFAULT_START, block_kv, "float16", scale)


def invariance_table(block_kv: int = 128, dtype: str = "float16", scale: float | None = None,
                     starts=TABLE3_START) -> list[dict[str, float]]:
    """Rows of the paper's Table 3 for any block size, dtype and scale. Where the rounded M is
    singular (possible in bfloat16) the affected entries are NaN."""
    check_scale(scale, block_kv, dtype)  # a bad scale is an error, not a table of NaNs

    def attempt(fn, *args):
        try:
            return fn(*args)
        except ValueError:
            return float("nan")

    rows = []
    for b0 in starts:
        b1 = attempt(optimal_beta, b0, block_kv, dtype, scale)
        row = {"initial_beta": b0, "optimized_beta": b1}
        for tag, b in (("initial", b0), ("optimized", b1)):
            inva = ideal_invariance(b) if np.isfinite(b) else float("nan")
            inva_r = attempt(practical_invariance, b, block_kv, dtype, scale) if np.isfinite(b) else float("nan")
            row[f"{tag}_inva"] = inva
            row[f"{tag}_inva_r"] = inva_r
            row[f"{tag}_rel_err"] = abs(inva - inva_r) / inva
        rows.append(row)
    return rows


def format_invariance_table(rows: list[dict[str, float]]) -> str:
    """Table 3's layout as plain text; an entry that does not exist (NaN: the rounded M is singular) is
    shown as "singular", with a note under the table."""
    head = (f"{'initial beta':>13} {'Inva':>9} {'Inva_r':>9} {'rel.err':>8}   "
            f"{'optimized beta':>14} {'Inva':>9} {'Inva_r':>9} {'rel.err':>8}")

    def cell(x: float, width: int, spec: str, suffix: str = "") -> str:
        return f"{'singular':>{width}}" if not np.isfinite(x) else f"{x:>{width - len(suffix)}{spec}}{suffix}"

    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{cell(r['initial_beta'], 13, '.6f')} {cell(r['initial_inva'], 9, '.3f')} "
            f"{cell(r['initial_inva_r'], 9, '.3f')} {cell(100 * r['initial_rel_err'], 8, '.2f', '%')}   "
            f"{cell(r['optimized_beta'], 14, '.6f')} {cell(r['optimized_inva'], 9, '.3f')} "
            f"{cell(r['optimized_inva_r'], 9, '.3f')} {cell(100 * r['optimized_rel_err'], 8, '.2f', '%')}")
    if any(not np.isfinite(v) for r in rows for v in r.values()):
        lines.append("singular: M rounded to this dtype is singular at that beta (its effective beta is >= 1), so "
                     "the removed mean cannot be recovered and no optimum exists from that start")
    return "\n".join(lines)

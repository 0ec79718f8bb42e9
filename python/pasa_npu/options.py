"""FIA's options, declared once: every argument of :func:`pasa_npu.fused_attention` after query, key and value.

:data:`DECLARED` holds one :class:`Option` per argument, in FIA's order: its name (and FIA v2's), the type the
Python forms annotate, the default, the ``torch.library`` schema type, the check of a scalar's value, FIA's rule
(``torch_npu.npu_fused_infer_attention_score``'s documentation), ours, and the test that holds ours. From it come
the keyword forms' defaults, both operators' schemas (:func:`op_schema`), the argument table of docs/fia.md
(:func:`markdown_table`) and the validation of every scalar option (:func:`check_options`); tests check the
written signatures and docstrings of every public form against it. :data:`NOT_IMPLEMENTED` declares FIA's and
FIA v2's arguments pasa-npu does not implement: each is accepted at its default and refused otherwise
(:func:`refuse_not_implemented`).

Tensor options (``atten_mask``, ``block_table``, ``learnable_sink``) and the lengths are checked against the
tensors they describe, in :func:`pasa_npu.problem.make_problem`; this module checks what a value alone decides.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import NamedTuple

from .precision import DEFAULT_PRECISION, PRECISIONS, get_allocation

__all__ = ["Option", "DECLARED", "OPTIONS", "DEFAULTS", "V2_NAMES", "NOT_IMPLEMENTED", "NotImplementedArgument",
           "check_options", "refuse_not_implemented", "op_schema", "markdown_table", "LAYOUTS", "SPARSE_MODES",
           "INNER_PRECISE", "NO_BAND", "INT64_MAX", "MAX_SCALE", "BACKEND_NAMES"]

LAYOUTS: tuple[str, ...] = ("BSH", "BSND", "BNSD", "BNSD_BSND", "TND")
SPARSE_MODES: tuple[int, ...] = (0, 1, 2, 3, 4)
INNER_PRECISE: tuple[int, ...] = (0, 1, 2, 3)
#: FIA's int32 "no limit" for pre_tokens / next_tokens.
NO_BAND = 2147483647
#: The largest pre_tokens / next_tokens (FIA's attributes are int64; both signs, so that −pre is one too).
INT64_MAX = 2**63 - 1
#: The largest scale accepted: FP16 inputs give |Q·Kᵀ| <= D·65504² < 2^52 for any D up to 2^20, so the
#: scaled scores, their log-sum-exp and every allocation's FP32 state stay below 2^116, within FP32's range.
MAX_SCALE = 2.0**64
#: The backends ``backend=`` names (pasa_npu.backends registers them).
BACKEND_NAMES: tuple[str, ...] = ("reference", "npu", "triton")


# ============================================================================================
# checks of one value
# ============================================================================================

def check_int(name: str, x, *, lo: int | None = None, hi: int | None = None,
              choices: tuple[int, ...] | None = None) -> int:
    if type(x) is int and (choices is None or x in choices) and (lo is None or x >= lo) and (hi is None or x <= hi):
        return x
    if isinstance(x, bool) or not isinstance(x, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(x).__name__}")
    x = int(x)
    if choices is not None and x not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {x}")
    if hi is not None and not lo <= x <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {x}")
    if lo is not None and x < lo:
        raise ValueError(f"{name} must be >= {lo}, got {x}")
    return x


def check_scale(scale, name: str = "scale") -> float:
    """``scale`` as a float: a positive real number, at most :data:`MAX_SCALE`."""
    if type(scale) is not float and (isinstance(scale, bool) or not isinstance(scale, numbers.Real)):
        raise TypeError(f"{name} must be a real number, got {type(scale).__name__}")
    scale = float(scale)
    if not 0.0 < scale <= MAX_SCALE:  # also rejects NaN and ±inf
        raise ValueError(f"{name} must be a positive finite number at most 2**64 (beyond, the scaled scores may "
                         f"overflow FP32), got {scale}")
    return scale


def check_beta(beta, name: str = "beta") -> float | None:
    """``beta`` as None or a float in [0, 1)."""
    if beta is None:
        return None
    if isinstance(beta, bool) or not isinstance(beta, numbers.Real):
        raise TypeError(f"{name} must be None or a real number in [0, 1), got {type(beta).__name__}")
    beta = float(beta)
    if not (0.0 <= beta < 1.0):  # also rejects NaN
        raise ValueError(f"{name} must be None or in [0, 1), got {beta}")
    return beta


def _check_tile(name: str, value) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be None or a positive int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be None or a positive int, got {value}")
    return int(value)


def _check_bool(name: str, x, optional: bool = False):
    if isinstance(x, bool) or (optional and x is None):
        return x
    raise TypeError(f"{name} must be {'None or ' if optional else ''}a bool, got {type(x).__name__}")


def _check_str(name: str, x, choices: tuple[str, ...], optional: bool = False):
    if optional and x is None:
        return None
    if not isinstance(x, str):
        raise TypeError(f"{name} must be {'None or ' if optional else 'a str, '}one of {choices}, "
                        f"got {type(x).__name__}")
    if x not in choices:
        raise ValueError(f"{name} must be {'None or ' if optional else ''}one of {choices}, got {x!r}")
    return x


def _check_precision(name: str, x) -> str | None:
    if x is not None and not isinstance(x, str):
        raise TypeError(f"{name} must be None or one of {PRECISIONS}, got {type(x).__name__}")
    if x is not None:
        get_allocation(x)  # ValueError naming precision and PRECISIONS
    return x


def _check_block_size(name: str, x) -> int:
    """An int; its value is checked with the table (FIA ignores it without one)."""
    if type(x) is not int and (isinstance(x, bool) or not isinstance(x, numbers.Integral)):
        raise TypeError(f"{name} must be an int (FIA's PageAttention page length), got {type(x).__name__}")
    return int(x)


# ============================================================================================
# the declaration
# ============================================================================================

class Option(NamedTuple):
    """One argument of the forms. ``annotation``: its type as the forms write it; ``schema``: its type in the
    operators' schemas (Tensor options are positional there); ``check``: (name, value) -> the value checked and
    normalised, None where the value is checked with the tensors; ``v2``: FIA v2's name ('' where FIA v2 has
    none, None where FIA v1 has none: learnable_sink); ``fia``/``ours``: the rules; ``test``: what holds ours."""

    name: str
    annotation: str
    default: object
    schema: str
    check: Callable | None
    fia: str
    ours: str
    test: str
    v2: str | None = ""


_LENGTHS = "Sequence[int] | torch.Tensor | None"
_T = "tests/backends/test_interface.py::"
_F = "tests/backends/test_fia_options.py::"

DECLARED: tuple[Option, ...] = (
    Option("atten_mask", "torch.Tensor | None", None, "Tensor?", None,
           "bool/int8/uint8, 1 = masked out (int values 0 or 1); modes 0/1: (Q_S, KV_S), (1 or B, Q_S, KV_S), "
           "(1 or B, 1, Q_S, KV_S), "
           "dims may be larger (aligned); Q_S = 1: (B, KV_S) too; modes 2-4: the compressed 2048×2048 mask",
           "the same; a 4-D mask may also carry N heads; the compressed mask's contents checked with check_inputs; "
           "TND takes no full mask",
           _T + "test_sparse_mode_0_explicit_mask_every_shape_and_dtype"),
    Option("actual_seq_lengths", _LENGTHS, None, "SymInt[]?", None,
           "valid query rows per batch, each <= S1: 1 value for every batch, or >= B values of which the first B "
           "are used; no effect at Q_S = 1; TND: required, cumulative, its count is B",
           "the same, as a list or a 1-D integer tensor; values are checked at Q_S = 1 too",
           _T + "test_varlen_list_rules_one_value_or_first_b", "actual_seq_qlen"),
    Option("actual_seq_lengths_kv", _LENGTHS, None, "SymInt[]?", None,
           "valid keys per batch, each <= S2: 1 value, or >= B values of which the first B are used; required "
           "with a block_table; TND: required, cumulative (each batch's own length with a block_table), its "
           "count is B",
           "the same, but TND takes >= B values too (B = actual_seq_lengths' count; the first B used)",
           _F + "test_lengths_take_at_least_b_values_and_use_the_first_b", "actual_seq_kvlen"),
    Option("num_heads", "int", 1, "SymInt", lambda n, x: check_int(n, x, lo=1),
           "query heads; equals query's N (BSND, BNSD), D = H / N (BSH)", "the same, >= 1",
           _T + "test_layout_specific_errors", "num_query_heads"),
    Option("scale", "float", 1.0, "float", lambda n, x: check_scale(x, n),
           "multiplies Q·Kᵀ", "a positive number <= 2**64; for pasa/pasa_fp32 within the shift matrix's FP16 range",
           _T + "test_a_scale_the_shift_matrix_cannot_hold_is_refused_by_name_before_any_work", "softmax_scale"),
    Option("pre_tokens", "int", NO_BAND, "SymInt", lambda n, x: check_int(n, x, lo=-INT64_MAX, hi=INT64_MAX),
           "band of modes 0 (with a mask) and 4; no effect at Q_S = 1", "the same, an int64; an empty band refused",
           _T + "test_sparse_mode_4_band_from_the_bottom_right"),
    Option("next_tokens", "int", NO_BAND, "SymInt", lambda n, x: check_int(n, x, lo=-INT64_MAX, hi=INT64_MAX),
           "see pre_tokens", "see pre_tokens", _T + "test_sparse_mode_0_band_from_pre_and_next_tokens"),
    Option("input_layout", "str", "BSH", "str", lambda n, x: _check_str(n, x, LAYOUTS),
           "BSH, BSND, BNSD, BNSD_BSND, TND, and the NBSD/NTD forms of MLA",
           "BSH, BSND, BNSD, BNSD_BSND, TND", _T + "test_every_layout_gives_the_same_numbers"),
    Option("num_key_value_heads", "int", 0, "SymInt", lambda n, x: check_int(n, x, lo=0),
           "KV heads, 0 = num_heads; divides num_heads, ratio <= 64", "the same, any ratio",
           _T + "test_gqa_and_mqa_equal_explicitly_repeated_kv"),
    Option("sparse_mode", "int", 0, "SymInt", lambda n, x: check_int(n, x, choices=SPARSE_MODES),
           "0-4 (5-8 not supported by FIA); no effect at Q_S = 1", "0-4",
           _T + "test_sparse_modes_2_and_3_causal"),
    Option("inner_precise", "int", 0, "SymInt", lambda n, x: check_int(n, x, choices=INNER_PRECISE),
           "bit 0: high precision / performance; bit 1: row-invalid correction; Q_S = 1: 0 or 1",
           "0-3 everywhere; bit 0 picks the allocation when precision is None; bit 1 always on",
           _T + "test_precision_none_follows_inner_precise"),
    Option("block_table", "torch.Tensor | None", None, "Tensor?", None,
           "PageAttention's int32 (B, max_blocks) table; its ids are the user's to guarantee; B rows (the "
           "decode tiling checks the row count only with TND)",
           "int32, at least B rows (the first B used); only the ids of a batch's used pages are read, and checked "
           "with check_inputs, so -1 padding past them passes in both check modes",
           _F + "test_table_ids_past_the_used_pages_are_ignored_in_both_check_modes"),
    Option("block_size", "int", 0, "SymInt", _check_block_size,
           "PageAttention's page length (128-512, 128-aligned for Q_S > 1; 16-aligned for Q_S = 1); ignored "
           "without a block_table",
           "with a block_table a multiple of 16 from 16 to 512; without one ignored (any int)",
           _F + "test_every_fia_argument_is_accepted_at_its_default"),
    Option("softmax_lse_flag", "bool", False, "bool", _check_bool,
           "return the lse (B, N, Q_S, 1), TND (T, N, 1); else a (1,) zero", "the same",
           _T + "test_lse_flag_off_gives_fias_placeholder", "return_softmax_lse"),
    Option("learnable_sink", "torch.Tensor | None", None, "Tensor?", None,
           "FIA v2 only: one BF16 logit per query head, 1-D of the query's N (with TND, D 64 or 128)",
           "float32/bfloat16/float16 (N,), any layout and head dim",
           "tests/serving/test_serving.py::test_sinks_join_once_in_every_allocation", None),
    Option("precision", "str | None", DEFAULT_PRECISION, "str?", _check_precision,
           "—", "one of pasa_npu.PRECISIONS; None follows inner_precise",
           _T + "test_precision_none_follows_inner_precise"),
    Option("beta", "float | None", None, "float?", lambda n, x: check_beta(x, n),
           "—", "PASA's β in [0, 1); None = the optimal default", _T + "test_block_size_and_beta"),
    Option("block_q", "int | None", None, "SymInt?", _check_tile,
           "—", "the loop's query tile (None = 128)", _T + "test_block_size_and_beta"),
    Option("block_kv", "int | None", None, "SymInt?", _check_tile,
           "—", "the loop's KV block; None = the block of the kernel that computes the call (backend's, or the "
           "device's), settled before any backend runs",
           _F + "test_the_default_kv_block_is_settled_before_the_backend_runs"),
    Option("backend", "str | None", None, "str?", lambda n, x: _check_str(n, x, BACKEND_NAMES, True),
           "—", "None, 'reference', 'npu' or 'triton'", _T + "test_bad_arguments_are_named"),
    Option("check_inputs", "bool | None", None, "bool?", lambda n, x: _check_bool(n, x, True),
           "—", "check values (a synchronisation); None follows PASA_NPU_CHECK_INPUTS",
           _T + "test_out_of_fp16_range_and_non_finite_inputs_are_refused_when_checked"),
    Option("safety_net", "bool", True, "bool", _check_bool,
           "—", "recompute overflowed rows on the fp32 path",
           _T + "test_safety_net_recomputes_overflowed_rows_on_the_fp32_path"),
)

#: What each option means, as the forms' docstrings say it (:func:`documented` puts it there): one entry per
#: option, in the declaration's order, "name: text" with its continuation lines indented.
_DOCS = """\
atten_mask: None, or a bool / int8 / uint8 tensor (True or 1 = masked out, 0 = kept).
    sparse_mode 0 and 1: the full mask, shape (S1, S2), (1 or B, S1, S2) or
    (1 or B, 1 or N, S1, S2); its last two dims may be larger than (S1, S2) (FIA's
    alignment padding), only the top-left (S1, S2) corner is read. When S1 == 1 it may
    also be (1 or B, S2). sparse_mode 2, 3, 4: FIA's compressed causal mask, exactly
    ``torch.triu(torch.ones(2048, 2048), 1)`` of shape (2048, 2048), (1, 2048, 2048) or
    (1, 1, 2048, 2048); the mode's rule builds the mask (its contents are checked with
    ``check_inputs``).
actual_seq_lengths: None, or the valid query length of each batch (a sequence of ints
    or a 1-D integer tensor, read on the host: a device tensor costs a synchronisation):
    one value for all batches, or at least B values (the first B are used), each in
    [0, S1]. Query rows past a batch's length are padding: their output is 0 and their
    lse +inf. Ignored when S1 == 1 (as in FIA). With TND it is required and cumulative
    (entry b = total query rows of batches 0..b, non-decreasing, last <= T); its length
    is the batch count. TND with a block_table: CUDA tensors for both lengths are not
    read on the host but by the kernels (no synchronisation; their values are checked
    only with ``check_inputs``), so that a captured CUDA graph replays whatever lengths
    they then hold.
actual_seq_lengths_kv: None, or the valid key/value length of each batch, with the
    same rules against S2 (required with TND: at least B values, the first B used,
    cumulative against T_kv, or with a block_table each batch's own key length, as in
    FIA). Keys past a batch's length are not attended to.
num_heads: N, the number of query heads (>= 1). Must equal the query's N dim (BSND,
    BNSD, TND) or divide H (BSH).
scale: the factor of Q Kᵀ, a positive number up to 2**64 (typically 1/sqrt(D)).
pre_tokens: with next_tokens, the band of sparse_mode 0 (with a mask) and 4: query i
    attends to key j only if -pre_tokens <= j - i - o <= next_tokens, where o = 0 for
    mode 0 (origin at the top-left corner) and o = S2 - S1 for mode 4 (origin at the
    bottom-right corner; S1, S2 the batch's valid lengths). Ignored by modes 1, 2, 3,
    by mode 0 without a mask, and when S1 == 1. pre_tokens + next_tokens must be >= 0
    where the band applies (otherwise the band is empty).
next_tokens: see pre_tokens.
input_layout: "BSH", "BSND", "BNSD", "BNSD_BSND" (BNSD input, BSND output) or "TND".
num_key_value_heads: the number of key/value heads (GQA / MQA); 0 means num_heads.
    num_heads must be a multiple of it. K/V heads are shared, never copied.
sparse_mode: 0 no mask, or ``atten_mask`` combined with the pre/next_tokens band;
    1 ``atten_mask`` alone (required); 2 causal from the top-left corner (j <= i);
    3 causal from the bottom-right corner (j <= i + S2 - S1); 4 band from the
    bottom-right corner (see pre_tokens). Modes 2-4 require the compressed mask.
inner_precise: FIA's 0..3. bit 0 selects FIA's high-precision (0, 2) or
    high-performance (1, 3) path; it picks the allocation only when precision is None.
    bit 1 (FIA's "row invalid" correction) is always on here: a row with every key
    masked gets output 0 (see docs/fia.md).
block_table: None, or FIA's PageAttention block table: an int32 (FIA's dtype) tensor of at
    least B rows (the first B used) and max_blocks columns, whose row b lists the cache
    blocks holding batch b's keys and values in order. Then
    ``key``/``value`` are the caches shared by all batches, (num_blocks, block_size,
    Nkv·D) or (num_blocks, Nkv, block_size, D), ``actual_seq_lengths_kv`` (required)
    says how many keys of its pages each batch uses, and the query takes any layout (TND:
    batch b's query rows are its cumulative range, any number of them, mixing decode,
    speculative and prefill requests in one call). Only the ids of the pages a batch uses
    (its first ceil(length / block_size)) are read, and checked with ``check_inputs``
    (on CPU tensors an id outside the cache is always a ValueError; on a device without
    the check it faults there); the entries past them may hold anything (-1 padding).
block_size: FIA's PageAttention page length: with a block_table a multiple of 16 from
    16 to 512; without one ignored, as in FIA.
softmax_lse_flag: whether to return the log-sum-exp of each row's scaled scores.
learnable_sink: None, or one sink logit per query head, shape (num_query_heads,), float32,
    bfloat16 (FIA v2's dtype) or float16, used as float32: a logit s_h in the true scale
    (the scale of ``softmax_scale``·q·k) that joins the softmax's denominator of every row of
    head h with no value, out = Σ_j e^{x_j} v_j / (Σ_j e^{x_j} + e^{s_h}); the lse becomes
    log(Σ_j e^{x_j} + e^{s_h}); a row with no visible key gives out 0 and lse s_h.
precision: the precision allocation, one of ``pasa_npu.PRECISIONS`` (the table in the
    README, docs/golden.md); None follows inner_precise: "fp32" for 0 and 2, "fp16_fp32" for 1 and 3.
beta: PASA's shift coefficient in [0, 1); None takes the optimal default for block_kv
    and scale. Only used by the shifted allocations.
block_q: the query tile of the loop (None = 128). Rows are independent, so it changes no
    result; the Triton and AscendC kernels pick their own.
block_kv: the KV block length of the loop. It is part of the blocked allocations' results:
    PASA's shift matrix is block_kv × block_kv, ``pasa_rs`` centres each block's keys and
    ``fp32_frame`` decides its frame moves per block. None takes the block of the kernel that
    computes the call, settled before any backend runs (:func:`pasa_npu.problem.default_block_kv`
    of ``backend``, or for None of the device's kernel: Triton on CUDA tensors, also where
    the reference backend stands in for it): 128, but 64 for ``fp32_frame`` on the Triton
    kernel above D = 128 (two pipeline stages of K and V fit the GPU's shared memory only at
    64 keys there). The Triton kernel takes 16, 32, 64, 128 or 256 for the blocked
    allocations, the AscendC kernel 128.
backend: "reference" (the golden model's loop in PyTorch ops, every allocation, any
    device: an emulator, slow), "triton" (the Triton kernel, CUDA tensors), "npu" (the
    AscendC kernel: NPU tensors once built with scripts/build_and_deploy.sh, or CPU
    tensors on the host model, an emulator for verification), or None: "npu" for NPU
    tensors, "triton" for CUDA tensors when it computes the allocation, else "reference".
check_inputs: check the inputs' values before computing: refuse NaN/Inf, bfloat16/float32
    values beyond FP16's range, int8/uint8 masks holding other than 0/1, and a compressed
    mask that is not FIA's. These checks read device memory (a host-device
    synchronisation each), so they are off by default; None follows the environment
    variable PASA_NPU_CHECK_INPUTS (1 = on). Without them a NaN/Inf input, or a value
    beyond FP16's range (which becomes Inf in FP16), gives NaN in the output rows it
    reaches, as any attention would.
safety_net: recompute on the FP32 path (``fp32``) every valid row whose output came back
    non-finite, whose lse is NaN, or whose state overflowed (lse +inf): PASA removes the
    scores' bias but not their amplitude, and FP16 running state can overflow on long
    contexts. It costs one host-device synchronisation, except for allocations that
    cannot overflow on finite FP16 inputs at any accepted scale (``Allocation.overflow_free``),
    where it does nothing. False returns the allocation's own result (for studies of the emulated
    hardware).
"""


def _entries(text: str) -> dict[str, str]:
    entries: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("    "):
            entries[name] += "\n" + line[4:]
        else:
            name, entries[name] = line.split(": ", 1)
    return entries


DOCS: dict[str, str] = _entries(_DOCS)


def documented(*names: str) -> Callable:
    """A decorator: ``{options}`` in the function's docstring becomes the docs of ``names`` (:data:`DOCS`)."""
    def document(function):
        entries = (name + ": " + DOCS[name].replace("\n", "\n" + " " * 12) for name in names)
        function.__doc__ = function.__doc__.replace("{options}", ("\n" + " " * 8).join(entries))
        return function
    return document


#: The options by name, in the declaration's order (the dict every form builds has these keys).
OPTIONS: tuple[str, ...] = tuple(o.name for o in DECLARED)
DEFAULTS: dict[str, object] = {o.name: o.default for o in DECLARED}
#: FIA v2's names of FIA's arguments.
V2_NAMES: dict[str, str] = {o.v2: o.name for o in DECLARED if o.v2}
#: The options each FIA form names (FIA v1 has no learnable_sink).
V1_OPTIONS: tuple[str, ...] = tuple(o.name for o in DECLARED if o.v2 is not None)
#: The options that are tensors: positional in the operators' schemas, after query, key and value.
TENSOR_OPTIONS: tuple[str, ...] = tuple(o.name for o in DECLARED if o.schema.startswith("Tensor"))
#: The operators' tensor argument for each length: a length given as a tensor goes there (its list argument then
#: None), so that torch.compile traces it without reading its values.
LENGTH_TENSORS: dict[str, str] = {name: name + "_tensor" for name in ("actual_seq_lengths", "actual_seq_lengths_kv")}

_QUANT = "quantisation"
_ROPE = "MLA rope inputs"
_PSE = "a position bias (pse_shift)"
_PREFIX = "shared prefixes"
_PADDING = "left padding"
_DTYPES = "dtype overrides"


def _all(names: str, default, what: str) -> dict:
    return {name: (default, what) for name in names.split()}


#: FIA's and FIA v2's arguments pasa-npu does not implement: name -> (default, what it is). Each form takes them
#: by keyword, at their default only.
NOT_IMPLEMENTED: dict[str, dict[str, tuple[object, str]]] = {
    "v1": {**_all("pse_shift", None, _PSE),
           **_all("dequant_scale1 quant_scale1 dequant_scale2 quant_scale2 quant_offset2 antiquant_scale "
                  "antiquant_offset key_antiquant_scale key_antiquant_offset value_antiquant_scale "
                  "value_antiquant_offset key_rope_antiquant_scale", None, _QUANT),
           **_all("query_padding_size kv_padding_size", None, _PADDING),
           **_all("key_shared_prefix value_shared_prefix actual_shared_prefix_len", None, _PREFIX),
           **_all("query_rope key_rope", None, _ROPE),
           **_all("antiquant_mode key_antiquant_mode value_antiquant_mode", 0, _QUANT)},
    "v2": {**_all("query_rope key_rope", None, _ROPE), **_all("pse_shift", None, _PSE),
           **_all("dequant_scale_query dequant_scale_key dequant_offset_key dequant_scale_value dequant_offset_value "
                  "dequant_scale_key_rope quant_scale_out quant_offset_out quant_scale_p", None, _QUANT),
           **_all("query_quant_mode key_quant_mode value_quant_mode", 0, _QUANT),
           **_all("query_dtype key_dtype value_dtype query_rope_dtype key_rope_dtype key_shared_prefix_dtype "
                  "value_shared_prefix_dtype dequant_scale_query_dtype dequant_scale_key_dtype "
                  "dequant_scale_value_dtype dequant_scale_key_rope_dtype out_dtype", None, _DTYPES)},
}


class NotImplementedArgument(ValueError):
    """FIA arguments pasa-npu does not implement, set to other than their defaults; ``names`` lists them."""

    def __init__(self, message: str, names: tuple[str, ...] = ()):
        super().__init__(message)
        self.names = names


def refuse_not_implemented(given: dict, form: str, version: str) -> None:
    """Accept FIA's (``version`` "v1") or FIA v2's ("v2") arguments pasa-npu does not implement at their
    defaults: a TypeError names any other keyword, a :class:`NotImplementedArgument` every one set."""
    known = NOT_IMPLEMENTED[version]
    for name in given:
        if name not in known:
            raise TypeError(f"{form}() got an unexpected keyword argument {name!r}")
    used = [name for name, x in given.items() if not _is_default(x, known[name][0])]
    if used:
        what = "; ".join(sorted({known[name][1] for name in used}))
        raise NotImplementedArgument(f"{', '.join(used)} set: {what}, which pasa-npu does not implement; pass the "
                                     "default (None or 0) or leave it out", tuple(used))


def _is_default(x, default) -> bool:
    if default is None:
        return x is None
    return type(x) is int and x == default


_CHECKS: dict[str, Callable | None] = {o.name: o.check for o in DECLARED}
_unknown = object()


def check_options(given: dict, form: str = "make_problem") -> dict:
    """``given`` (options by name, any subset of :data:`OPTIONS`) with the defaults for the others, each scalar
    checked and normalised by its declared check: TypeError/ValueError naming the option. An unknown name is a
    TypeError naming ``form``."""
    checked = dict(DEFAULTS)  # valid by declaration: only what the call gives is checked
    for name, x in given.items():
        check = _CHECKS.get(name, _unknown)
        if check is _unknown:
            raise TypeError(f"{form}() got an unexpected keyword argument {name!r}")
        checked[name] = x if check is None or x is DEFAULTS[name] else check(name, x)
    return checked


# ============================================================================================
# what the declaration generates
# ============================================================================================

def op_schema(out: bool) -> str:
    """The schema of ``torch.ops.pasa_npu.fused_attention`` (``out``: of ``fused_attention_out``)."""
    tensors = ", ".join(f"{o.schema} {o.name}" for o in DECLARED if o.name in TENSOR_OPTIONS)
    if out:
        tensors += ", Tensor(a!) attention_out, Tensor(b!) softmax_lse, Tensor(c!)? workspace"
    tensors += "".join(f", Tensor? {name}=None" for name in LENGTH_TENSORS.values())
    scalars = ", ".join(f"{o.schema} {o.name}" for o in DECLARED if o.name not in TENSOR_OPTIONS)
    return f"(Tensor query, Tensor key, Tensor value, {tensors}, *, {scalars}) -> {'()' if out else '(Tensor, Tensor)'}"


def markdown_table() -> str:
    """docs/fia.md's table of the arguments: name (FIA v2's), default, FIA's rule, ours, the test."""
    rows = ["| argument (FIA v2) | default | FIA | `fused_attention` | test |", "|---|---|---|---|---|"]
    for o in DECLARED:
        name = f"`{o.name}`" + (f" (`{o.v2}`)" if o.v2 else " (v2 only)" if o.v2 is None else "")
        rows.append(f"| {name} | `{o.default!r}` | {o.fia} | {o.ours} | `{o.test}` |")
    tests = f"`{_F}test_every_fia_argument_is_accepted_at_its_default`, " \
            f"`{_F}test_unimplemented_arguments_are_refused_by_name`"
    for version, form in (("v1", "FIA"), ("v2", "FIA v2")):
        for what, default in sorted({(w, repr(d)) for d, w in NOT_IMPLEMENTED[version].values()}):
            names = ", ".join(f"`{n}`" for n, (d, w) in NOT_IMPLEMENTED[version].items()
                              if (w, repr(d)) == (what, default))
            rows.append(f"| {names} ({form}) | `{default}` | {what} | not implemented: accepted at the default, "
                        f"otherwise a ValueError naming them | {tests} |")
    return "\n".join(rows)


if __name__ == "__main__":  # python -m pasa_npu.options: the table docs/fia.md holds
    print(markdown_table())

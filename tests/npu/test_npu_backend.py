"""The ``npu`` backend (python/pasa_npu/backends/npu.py): the AscendC kernel behind fused_attention.

No NPU, CANN or torch_npu exists here. What runs: availability and support reporting; the
translation of a problem into the op's FIA-level arguments (layout, lengths, sparse mode, mask passed
natively), checked by a stand-in for the extension ``pasa_npu._npu_ext`` that forwards the very
arguments the extension would receive to the kernel on the host model; and the production path of
``fused_attention(backend="npu")`` on CPU tensors, which is the kernel on the host model, over FIA's
matrix of layouts, GQA, masks, sparse modes, varlen and decode against the reference backend (which
tests/backends/test_interface.py checks against an independent float64 implementation of FIA's rules).
"""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
import torch

import pasa_npu
from pasa_npu import golden, metrics
from pasa_npu.backends import npu
from pasa_npu.interface import LSE_NO_KEY
from pasa_npu.problem import make_problem

HAS_TORCH_NPU = importlib.util.find_spec("torch_npu") is not None
COMPRESSED = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)


def _host_model_built() -> bool:
    return npu._load_host_model() is not None


needs_host_model = pytest.mark.skipif(not _host_model_built(),
                                      reason="pasa_npu._npu_host_model is not built (pip install -e .)")


@pytest.mark.skipif(HAS_TORCH_NPU, reason="torch_npu is installed here; this checks the machine without it")
def test_unavailable_on_npu_tensors_without_torch_npu_says_why():
    reason = npu.unavailable_reason()
    assert reason is not None and "torch_npu" in reason and "scripts/build_and_deploy.sh" in reason


def test_other_devices_are_refused_with_the_accepted_ones():
    reason = npu.BACKEND.unavailable_reason(torch.device("meta"))
    assert "NPU tensors" in reason and "CPU tensors" in reason and "meta" in reason


def _problem(**kw):
    q = torch.zeros(1, 2, 4, 16, dtype=torch.float16)
    kw.setdefault("precision", "pasa_fp32")
    return make_problem(q, q, q, num_heads=2, input_layout=kw.pop("input_layout", "BNSD"), **kw)


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_precisions_the_kernel_lacks_are_refused_with_the_ones_it_has(precision):
    why = npu.BACKEND.supports(_problem(precision=precision))
    assert why == ("the AscendC kernel implements precision ('fp16_fp32', 'pasa', 'pasa_fp32', 'pasa_rs', "
                   f"'fp32_frame'), not {precision!r}")
    with pytest.raises(ValueError, match=r"backend='npu': the AscendC kernel implements"):
        q = torch.zeros(1, 2, 4, 16, dtype=torch.float16)
        pasa_npu.fused_attention(q, q, q, num_heads=2, input_layout="BNSD", precision=precision, backend="npu")


def test_other_kv_block_lengths_are_refused_and_tnd_is_taken():
    assert "KV block is 128" in npu.BACKEND.supports(_problem(block_kv=64))
    q = torch.zeros(4, 2, 16, dtype=torch.float16)
    tnd = make_problem(q, q, q, num_heads=2, input_layout="TND", actual_seq_lengths=[4], precision="pasa",
                       actual_seq_lengths_kv=[4])
    assert npu.BACKEND.supports(tnd) is None
    assert npu.kernel_call(tnd).attrs["input_layout"] == "TND"


def test_head_dims_the_kernel_lacks_are_refused_so_that_a_call_falls_back():
    for d in (8, 24, 272):
        q = torch.zeros(1, 2, 4, d, dtype=torch.float16)
        why = npu.BACKEND.supports(make_problem(q, q, q, num_heads=2, input_layout="BNSD", precision="pasa_rs"))
        assert why == f"the AscendC kernel takes head dims that are multiples of 16 in [16, 256], got {d}"
    with pytest.raises(ValueError, match=r"backend='npu': the AscendC kernel takes head dims"):
        pasa_npu.fused_attention(q, q, q, num_heads=2, input_layout="BNSD", backend="npu")


@needs_host_model
def test_band_limits_beyond_the_sequences_are_saturated_for_the_tiling():
    """pre/next tokens up to int64's range: the tiling adds them in int64, so the kernel call saturates them at
    ±(S1 + S2), where they keep the same keys: the result equals FIA's default "no limit"."""
    q = torch.randn(1, 2, 20, 16).half()
    k = torch.randn(1, 2, 30, 16).half()
    mask = torch.rand(20, 30) < 0.2
    kw = dict(num_heads=2, input_layout="BNSD", atten_mask=mask, backend="npu", softmax_lse_flag=True)
    want = pasa_npu.fused_attention(q, k, k, **kw)
    big = make_problem(q, k, k, num_heads=2, input_layout="BNSD", atten_mask=mask, pre_tokens=2**63 - 1,
                       next_tokens=2**63 - 1)
    assert (npu.kernel_call(big).attrs["pre_tokens"], npu.kernel_call(big).attrs["next_tokens"]) == (50, 50)
    got = pasa_npu.fused_attention(q, k, k, pre_tokens=2**63 - 1, next_tokens=2**63 - 1, **kw)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_npu_tensors_select_the_npu_backend_and_others_never_do():
    from pasa_npu import backends

    assert backends._ORDER["npu"][0] == "npu" and backends._ORDER["privateuseone"][0] == "npu"
    assert backends.select(_problem()).name == "reference"  # CPU tensors: the reference backend by default


@pytest.mark.parametrize("layout, sent", [("BSH", "BSH"), ("BSND", "BSND"), ("BNSD", "BNSD"), ("BNSD_BSND", "BNSD")])
def test_kernel_call_passes_the_problem_natively(layout, sent):
    b, n, nkv, s1, s2, d = 2, 4, 2, 5, 9, 16
    shapes = {"BSH": ((b, s1, n * d), (b, s2, nkv * d)), "BSND": ((b, s1, n, d), (b, s2, nkv, d)),
              "BNSD": ((b, n, s1, d), (b, nkv, s2, d)), "BNSD_BSND": ((b, n, s1, d), (b, nkv, s2, d))}[layout]
    q = torch.randn(shapes[0]).float()   # float32 in: FP16 to the kernel
    k = torch.randn(shapes[1]).float()
    mask = torch.rand(b, 1, s1, s2 + 3) < 0.3   # wider than S2: only the top-left corner is read
    problem = make_problem(q, k, k, atten_mask=mask, actual_seq_lengths=[5, 3], actual_seq_lengths_kv=[9, 7],
                           num_heads=n, num_key_value_heads=nkv, input_layout=layout, scale=0.3, sparse_mode=0,
                           pre_tokens=2, next_tokens=1, precision="pasa", beta=0.9)
    call = npu.kernel_call(problem)
    assert call.attrs == dict(num_heads=n, scale=0.3, pre_tokens=2, next_tokens=1, input_layout=sent,
                              num_key_value_heads=nkv, sparse_mode=0, beta=0.9, precision="pasa", block_size=0)
    assert call.block_table is None
    assert call.query.dtype == torch.float16 and call.query.is_contiguous()
    assert torch.equal(call.query, q.half()) and torch.equal(call.key, k.half())
    assert call.actual_seq_lengths == (5, 3) and call.actual_seq_lengths_kv == (9, 7)
    assert torch.equal(call.atten_mask, mask[:, :, :, :s2]) and call.atten_mask.is_contiguous()
    causal = make_problem(q, k, k, atten_mask=COMPRESSED, sparse_mode=3, num_heads=n, num_key_value_heads=nkv,
                          input_layout=layout, precision="pasa_fp32")
    call = npu.kernel_call(causal)
    assert call.atten_mask is None and call.attrs["sparse_mode"] == 3 and call.attrs["beta"] == -1.0


class _ExtensionStandIn:
    """Stands in for pasa_npu._npu_ext: takes exactly the extension's arguments and runs them on the
    kernel on the host model, returning what the extension returns (out, lse (B, N, S1, 1))."""

    def __init__(self):
        self.calls = []

    def fused_attention(self, query, key, value, atten_mask, actual_seq_lengths, actual_seq_lengths_kv, block_table,
                        learnable_sink, *, num_heads, scale, pre_tokens, next_tokens, input_layout, num_key_value_heads, sparse_mode,
                        inner_precise, block_size, beta, precision):
        self.calls.append(dict(input_layout=input_layout, lengths=(actual_seq_lengths, actual_seq_lengths_kv),
                               sparse_mode=sparse_mode, mask=atten_mask, block_table=block_table,
                               block_size=block_size, learnable_sink=learnable_sink))
        assert inner_precise == 0
        assert actual_seq_lengths is None or isinstance(actual_seq_lengths, list)
        assert block_table is None or (block_table.dtype == torch.int32 and block_table.is_contiguous())
        assert learnable_sink is None or (learnable_sink.dtype == torch.float32 and learnable_sink.is_contiguous())
        call = npu.KernelCall(query, key, value, atten_mask,
                              None if actual_seq_lengths is None else tuple(actual_seq_lengths),
                              None if actual_seq_lengths_kv is None else tuple(actual_seq_lengths_kv),
                              dict(num_heads=num_heads, scale=scale, pre_tokens=pre_tokens, next_tokens=next_tokens,
                                   input_layout=input_layout, num_key_value_heads=num_key_value_heads,
                                   sparse_mode=sparse_mode, beta=beta, precision=precision, block_size=block_size),
                              block_table, learnable_sink)
        out, lse, _ = npu.launch_host_model(call)
        return out, lse[..., None]


@needs_host_model
def test_the_extension_receives_what_the_host_model_runs(monkeypatch):
    stand_in = _ExtensionStandIn()
    monkeypatch.setattr(npu, "_ext", lambda: stand_in)
    g = torch.Generator().manual_seed(3)
    b, n, nkv, s1, s2, d = 2, 4, 2, 70, 200, 64
    q = (torch.randn(b, s1, n * d, generator=g) + 2).half()
    k = (torch.randn(b, s2, nkv * d, generator=g) + 2).half()
    problem = make_problem(q, k, k, atten_mask=COMPRESSED, sparse_mode=3, actual_seq_lengths=[70, 33],
                           actual_seq_lengths_kv=[200, 150], num_heads=n, num_key_value_heads=nkv,
                           input_layout="BSH", scale=d ** -0.5, precision="pasa_fp32")
    call = npu.kernel_call(problem)
    out, lse, overflow = npu.launch_extension(call)
    want, want_lse, _ = npu.launch_host_model(call)
    assert overflow is None and stand_in.calls[0]["input_layout"] == "BSH" and stand_in.calls[0]["sparse_mode"] == 3
    assert stand_in.calls[0]["lengths"] == ([70, 33], [200, 150])
    assert torch.equal(out, want) and torch.equal(lse[..., 0], want_lse)


@needs_host_model
def test_the_extension_receives_the_block_table_natively(monkeypatch):
    """PageAttention: the extension gets the caches, the int32 table and block_size (no gathered copy)."""
    stand_in = _ExtensionStandIn()
    monkeypatch.setattr(npu, "_ext", lambda: stand_in)
    g = torch.Generator().manual_seed(4)
    b, n, nkv, d, page = 2, 4, 2, 32, 48
    q = torch.randn(b, 1, n * d, generator=g).half()
    kc, vc = (torch.randn(6, page, nkv * d, generator=g).half() for _ in range(2))
    table = torch.tensor([[4, 0, 2], [1, 5, 3]], dtype=torch.int32)
    problem = make_problem(q, kc, vc, block_table=table, block_size=page, actual_seq_lengths_kv=[130, 97],
                           num_heads=n, num_key_value_heads=nkv, input_layout="BSH", precision="pasa")
    call = npu.kernel_call(problem)
    out, lse, _ = npu.launch_extension(call)
    want, want_lse, _ = npu.launch_host_model(call)
    sent = stand_in.calls[0]
    assert sent["block_size"] == page and torch.equal(sent["block_table"], table)
    assert torch.equal(out, want) and torch.equal(lse[..., 0], want_lse)


# ------------------------------------------------------------------------------------------------
# the production path on the host model: FIA's matrix against the reference backend
# ------------------------------------------------------------------------------------------------

def _qkv(layout, b, n, nkv, s1, s2, d, seed, mean=0.0):
    g = torch.Generator().manual_seed(seed)
    shape = {"BSH": lambda h, s: (b, s, h * d), "BSND": lambda h, s: (b, s, h, d),
             "BNSD": lambda h, s: (b, h, s, d), "BNSD_BSND": lambda h, s: (b, h, s, d)}[layout]
    q = (torch.randn(shape(n, s1), generator=g) + mean).half()
    k = (torch.randn(shape(nkv, s2), generator=g) + mean).half()
    v = torch.randn(shape(nkv, s2), generator=g).half()
    return q, k, v


MATRIX = {
    "plain_bnsd": dict(layout="BNSD"),
    "bsh_gqa_tails": dict(layout="BSH", n=4, nkv=2, s1=70, s2=200),
    "bsnd_mqa": dict(layout="BSND", n=4, nkv=1),
    "bnsd_bsnd": dict(layout="BNSD_BSND", n=2, nkv=2),
    "biased_n30": dict(layout="BNSD", mean=30.0, s2=256),
    "mask_per_head_uint8": dict(layout="BNSD", mask=("head", torch.uint8)),
    "mask_batch_bool_band": dict(layout="BSH", mask=("batch", torch.bool), pre=5, nxt=3),
    "mode1_mask_alone": dict(layout="BNSD", mask=("2d", torch.bool), mode=1, pre=0, nxt=0),
    "mode2_causal": dict(layout="BNSD", mode=2, s1=90, s2=90),
    "mode3_causal_bottom_right": dict(layout="BSND", mode=3, s1=40, s2=150),
    "mode4_band": dict(layout="BNSD", mode=4, pre=20, nxt=5, s1=60, s2=130),
    "varlen": dict(layout="BSH", b=3, s1=70, s2=200, lq=[70, 1, 0], lk=[200, 130, 5]),
    "varlen_causal": dict(layout="BNSD", b=2, mode=3, lq=[33, 64], lk=[150, 64], s1=64, s2=150),
    "varlen_kv_zero": dict(layout="BNSD", b=2, lk=[0, 90]),
    "decode": dict(layout="BSH", s1=1, s2=300, n=8, nkv=2),
    "decode_mask": dict(layout="BNSD", s1=1, s2=260, mask=("decode", torch.bool)),
    "fully_masked_row": dict(layout="BNSD", mask=("empty_row", torch.bool)),
}


def _matrix_call(case, precision, backend):
    c = dict(b=2, n=2, nkv=2, s1=37, s2=150, d=64, layout="BNSD", mean=0.0, mode=0, pre=2147483647,
             nxt=2147483647, mask=None, lq=None, lk=None)
    c.update(case)
    q, k, v = _qkv(c["layout"], c["b"], c["n"], c["nkv"], c["s1"], c["s2"], c["d"], seed=len(str(case)), mean=c["mean"])
    g = torch.Generator().manual_seed(11)
    kw = dict(num_heads=c["n"], num_key_value_heads=c["nkv"], input_layout=c["layout"], scale=c["d"] ** -0.5,
              sparse_mode=c["mode"], pre_tokens=c["pre"], next_tokens=c["nxt"], softmax_lse_flag=True,
              actual_seq_lengths=c["lq"], actual_seq_lengths_kv=c["lk"], precision=precision, backend=backend,
              safety_net=False)
    if c["mode"] in (2, 3, 4):
        kw["atten_mask"] = COMPRESSED
    elif c["mask"] is not None:
        kind, dtype = c["mask"]
        shape = {"head": (c["b"], c["n"], c["s1"], c["s2"]), "batch": (c["b"], c["s1"], c["s2"]),
                 "2d": (c["s1"], c["s2"]), "decode": (c["b"], c["s2"]), "empty_row": (c["s1"], c["s2"])}[kind]
        m = torch.rand(shape, generator=g) < 0.3
        if kind == "empty_row":
            m[3] = True
        kw["atten_mask"] = m.to(dtype)
    return pasa_npu.fused_attention(q, k, v, **kw)


@needs_host_model
@pytest.mark.parametrize("precision", ["pasa", "pasa_fp32", "fp16_fp32", "pasa_rs"])
@pytest.mark.parametrize("case", list(MATRIX), ids=list(MATRIX))
def test_fia_matrix_through_the_kernel_equals_the_reference(case, precision):
    """The kernel rounds where the golden model rounds: all-FP16 ``pasa`` and ``pasa_rs`` (D = 64: S' in one
    Mmad call; its FP32 exp and log are the golden model's) bit-identical to the reference backend outside
    decode, the other FP32-state allocations and decode within a few FP16 ulps;
    lse, padded rows (+inf) and rows with no key (LSE_NO_KEY) identical in kind. (FlashAttention,
    "fp16_fp32", on the biased case: its unscaled S ≈ 57600 ± 330 stays below 65504, in FP16 steps
    of 32, the same in both.)"""
    out, lse = _matrix_call(MATRIX[case], precision, "npu")
    ref, ref_lse = _matrix_call(MATRIX[case], precision, "reference")
    assert out.shape == ref.shape and out.dtype == ref.dtype and lse.shape == ref_lse.shape
    assert torch.equal(torch.isposinf(lse), torch.isposinf(ref_lse))
    assert torch.equal(lse == LSE_NO_KEY, ref_lse == LSE_NO_KEY)
    if precision in ("pasa", "pasa_rs") and MATRIX[case].get("s1") != 1:
        assert torch.equal(out, ref)
    else:
        # FP32 row state, or decode's split-KV partials merged through their lse: other roundings,
        # bounded in FP16 ulps of the element plus of its row's largest output.
        ulp = torch.finfo(torch.float16).eps * (ref.float().abs() + ref.float().abs().amax(-1, keepdim=True))
        ulp = ulp.clamp_min(2 ** -24)  # rows of zeros (padding, no key): exact zeros expected
        assert float(((out.float() - ref.float()).abs() / ulp).max()) <= 4
    finite = torch.isfinite(ref_lse)
    assert torch.allclose(lse[finite], ref_lse[finite], rtol=1e-3, atol=1e-2)


@needs_host_model
def test_npu_is_as_accurate_as_the_reference_against_float64():
    b, n, nkv, s1, s2, d = 2, 4, 2, 70, 200, 64
    q, k, v = _qkv("BNSD", b, n, nkv, s1, s2, d, seed=4, mean=2.0)
    kw = dict(num_heads=n, num_key_value_heads=nkv, input_layout="BNSD", scale=d ** -0.5, precision="pasa_fp32")
    out, _ = pasa_npu.fused_attention(q, k, v, backend="npu", **kw)
    ref, _ = pasa_npu.fused_attention(q, k, v, backend="reference", **kw)
    f64, _ = golden.reference(q.numpy(), k.numpy(), v.numpy(), scale=d ** -0.5)
    assert metrics.rmse(out.numpy(), f64) <= 1.1 * metrics.rmse(ref.numpy(), f64)


@needs_host_model
def test_rows_whose_shifted_scores_overflow_are_recomputed_by_the_safety_net():
    """Zero-mean keys of amplitude 100 (nothing for PASA's shift to remove): |S'| = 100*100*64/8 = 80000 >
    65504, so S' overflows in FP16 and the kernel's rows are not finite; fused_attention's safety net
    must return the float64-accurate answer for them and keep the kernel's other rows."""
    from pasa_npu import npu_host_model

    g = torch.Generator().manual_seed(5)
    b, n, s1, s2, d = 1, 2, 16, 256, 64
    q = torch.full((b, n, s1, d), 100.0, dtype=torch.float16)
    q[:, 1] = torch.randn(s1, d, generator=g).half()           # head 1: ordinary scores, kept from the kernel
    sign = torch.tensor([1.0, -1.0]).repeat(s2 // 2)[:, None]
    k = (100 * sign * torch.ones(s2, d)).half().expand(b, n, s2, d).contiguous()
    v = torch.randn(b, n, s2, d, generator=g).half()
    kw = dict(num_heads=n, input_layout="BNSD", scale=d ** -0.5, softmax_lse_flag=True, precision="pasa")
    raw, _, overflow = npu_host_model.run_with_status(q, k, v, **kw)
    assert overflow and not torch.isfinite(raw[:, 0]).all() and torch.isfinite(raw[:, 1]).all()

    out, lse = pasa_npu.fused_attention(q, k, v, backend="npu", **kw)
    ref, ref_lse = golden.reference(q.numpy(), k.numpy(), v.numpy(), scale=d ** -0.5)
    assert torch.isfinite(out).all() and torch.isfinite(lse).all()
    assert metrics.rmse(out[:, 0].float().numpy(), ref[:, 0]) < 1e-3
    assert torch.equal(out[:, 1], raw[:, 1])                      # rows that did not overflow: the kernel's
    assert np.allclose(lse[:, 0, :, 0].numpy(), ref_lse[:, 0], rtol=1e-6)
    assert math.isfinite(float(lse[0, 1, 0, 0]))


@needs_host_model
def test_the_kernels_tiling_keys_are_the_allocations():
    """precision.Allocation.kernel_key is the one statement of which allocation the kernel computes
    under which tiling key: op_host's tiling agrees for every allocation, and refuses the others."""
    from pasa_npu.precision import ALLOCATIONS

    q = torch.zeros(1, 2, 4, 16, dtype=torch.float16)
    for name, alloc in ALLOCATIONS.items():
        call = npu.kernel_call(make_problem(q, q, q, num_heads=2, input_layout="BNSD", precision=name))
        if alloc.kernel_key is None:
            with pytest.raises(ValueError, match="precision"):
                npu.tiling(call)
        else:
            assert npu.tiling(call)["tiling_key"] == alloc.kernel_key


@needs_host_model
def test_the_kernels_copies_of_shared_constants_are_the_packages():
    """What the C++ side restates of python/pasa_npu (op_kernel/pasa_allocation.h's allocation table and policies,
    op_host's default precision, pasa_rs's reshift thresholds, fp32_frame's frame rules) equals the Python statement: a change on one side
    alone fails here. The β solver's port is checked in test_npu_host_model.py."""
    from pasa_npu import blockwise
    from pasa_npu.precision import ALLOCATIONS, DEFAULT_PRECISION

    module = npu.host_model()
    kernel = {a["name"]: a for a in module.kernel_allocations()}
    assert set(kernel) == {n for n, a in ALLOCATIONS.items() if a.kernel_key is not None}
    for name, policy in kernel.items():
        alloc = ALLOCATIONS[name]
        assert policy["tiling_key"] == alloc.kernel_key, name
        # the score type is S's (or S''s) out of the cube; the state type is also P V's and O's
        assert policy["score_bytes"] == {"float16": 2, "float32": 4}[alloc.score], name
        assert alloc.output == alloc.state, name
        assert policy["state_bytes"] == {"float16": 2, "float32": 4}[alloc.state], name
        # the framed allocation sums O and l on the cube, from V with a column of ones appended
        assert policy["sums_on_cube"] == alloc.framed, name
        assert policy["value_extra_cols"] == (16 if alloc.framed else 0), name
        assert policy["prepass"] == ("shift_matrix" if alloc.shifted else "centred_keys" if alloc.row_shifted
                                     else "none"), name
        assert policy["scale"] == ("in_shift_matrix" if alloc.shifted else "pow2_and_rho" if alloc.row_shifted
                                   else "on_scores"), name
        assert (policy["handshake"] == "per_block_rounds") == alloc.row_shifted, name
    assert len({a["tiling_key"] for a in kernel.values()}) == len(kernel)
    assert module.DEFAULT_PRECISION == DEFAULT_PRECISION
    assert (module.RESHIFT_AT, module.RESHIFT_RELEVANCE) == (blockwise.RESHIFT_AT, blockwise.RESHIFT_RELEVANCE)
    assert ((module.FRAME_UP, module.FRAME_DOWN, module.FRAME_DOWN_BLOCKS, module.FRAME_DROP_LIMIT)
            == (blockwise.FRAME_UP, blockwise.FRAME_DOWN, blockwise.FRAME_DOWN_BLOCKS, blockwise.FRAME_DROP_LIMIT))


def test_the_op_definition_takes_the_tilings_default_precision():
    """The CANN op definition (never compiled here) names its default precision through pasa::kDefaultPrecision,
    the constant the previous test holds equal to the package's default."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "op_host" / "pasa_fused_attention_def.cpp").read_text()
    assert 'Attr("precision").AttrType(OPTIONAL).String(pasa::kDefaultPrecision)' in text


def test_the_op_definitions_fia_attributes_default_as_the_option_declaration():
    """Each FIA attribute of the CANN op definition has the default options.DECLARED gives it (FIA's own)."""
    import re
    from pathlib import Path

    from pasa_npu.options import DEFAULTS

    text = (Path(__file__).resolve().parents[2] / "op_host" / "pasa_fused_attention_def.cpp").read_text()
    attrs = dict(re.findall(r'this->Attr\("(\w+)"\)\.AttrType\(\w+\)\.(\w+\([^)]*\))', text))
    fia = {name: value for name, value in attrs.items() if name not in ("beta", "precision")}  # PASA's own
    assert set(fia) <= set(DEFAULTS) and len(fia) == 10, sorted(fia)
    for name, value in fia.items():
        kind, literal = re.fullmatch(r"(\w+)\((.*)\)", value).groups()
        parsed = {"Int": int, "Float": float, "Bool": lambda x: x == "true", "String": lambda x: x.strip('"')}[kind]
        assert parsed(literal) == DEFAULTS[name], (name, literal, DEFAULTS[name])


def test_a_device_whose_kernel_cannot_take_the_call_warns_once_and_runs_the_reference(monkeypatch):
    from pasa_npu import backends

    monkeypatch.setitem(backends._ORDER, "cpu", ("npu", "reference"))  # CPU tensors as if on an NPU
    monkeypatch.setattr(backends, "_WARNED", set())
    problem = _problem(precision="fp16")
    with pytest.warns(RuntimeWarning, match=r"backend 'npu' cannot run this call .*implements precision"):
        assert backends.select(problem).name == "reference"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert backends.select(problem).name == "reference"  # said once
    assert backends.select(_problem(precision="pasa")).name == "npu"

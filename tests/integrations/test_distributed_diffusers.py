"""The "pasa" backend of diffusers' attention dispatcher, alone and under diffusers' own context
parallelism (ring, Ulysses, ring × Ulysses) on a tiny randomly initialised FluxTransformer2DModel
(an MMDiT), on forked gloo ranks of the CPU. No weights are downloaded."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

diffusers = pytest.importorskip("diffusers")

from diffusers import ContextParallelConfig, FluxTransformer2DModel  # noqa: E402
from diffusers.models.attention_dispatch import attention_backend, dispatch_attention_fn  # noqa: E402

import pasa_npu.integrations.diffusers as pasa_diffusers  # noqa: E402
from pasa_npu import golden  # noqa: E402
from pasa_npu.integrations.diffusers import register_backend  # noqa: E402

from support import launch  # noqa: E402

TOL = 1e-3


def tiny_flux():
    torch.manual_seed(0)
    return FluxTransformer2DModel(patch_size=1, in_channels=4, num_layers=1, num_single_layers=1,
                                  attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                  pooled_projection_dim=32, axes_dims_rope=(4, 4, 8)).eval()


def flux_inputs():
    """A 4x4 latent (16 image tokens) and 8 text tokens: 24 tokens, split 2 or 4 ways by diffusers."""
    g = torch.Generator().manual_seed(1)
    ids = torch.stack(torch.meshgrid(torch.zeros(1), torch.arange(4.0), torch.arange(4.0), indexing="ij"), -1)
    return dict(hidden_states=torch.randn(1, 16, 4, generator=g),
                encoder_hidden_states=torch.randn(1, 8, 32, generator=g),
                pooled_projections=torch.randn(1, 32, generator=g), timestep=torch.tensor([0.5]),
                img_ids=ids.reshape(-1, 3), txt_ids=torch.zeros(8, 3), return_dict=False)


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


@pytest.fixture(scope="module", autouse=True)
def pasa_backend():
    assert register_backend(precision="pasa_fp32") == "pasa"


# ============================================================================================
# one process
# ============================================================================================

def test_model_on_the_pasa_backend_matches_sdpa():
    model, inputs = tiny_flux(), flux_inputs()
    with torch.no_grad():
        want = model(**inputs)[0]
        model.set_attention_backend("pasa")
        got = model(**inputs)[0]
    r = rel(got, want)
    print(f"flux, pasa backend vs native SDPA: relative error {r:.2e}")
    assert 0 < r < TOL  # FP16 rounding of Q, K, V: close, and not SDPA itself


def _qkv(seed=0, b=2, s1=7, s2=9, h=4, hkv=4, d=16):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, s1, h, d, generator=g), torch.randn(b, s2, hkv, d, generator=g),
            torch.randn(b, s2, hkv, d, generator=g))


def _sdpa(q, k, v, **kw):
    return F.scaled_dot_product_attention(*(x.half().float().transpose(1, 2) for x in (q, k, v)), **kw).transpose(1, 2)


@pytest.mark.parametrize("case", ["none", "bool key padding", "bool (S1, S2)", "bool (B, S1, S2)", "additive 4-D",
                                  "causal", "gqa"])
def test_dispatch_masks_causal_and_gqa_match_sdpa(case):
    q, k, v = _qkv(hkv=2 if case == "gqa" else 4, s1=9 if case == "causal" else 7)
    keep = torch.ones(2, 9, dtype=torch.bool)
    keep[1, 5:] = False
    kw, sdpa_kw = {}, {}
    if case == "bool key padding":
        kw["attn_mask"], sdpa_kw["attn_mask"] = keep, keep[:, None, None, :]
    elif case in ("bool (S1, S2)", "bool (B, S1, S2)"):  # FIA's own 2-D form, and the 3-D one lifted to 4-D
        rows = torch.rand(2, 7, 9, generator=torch.Generator().manual_seed(1)) < 0.7
        rows[..., 0] = True
        rows = rows[0] if case == "bool (S1, S2)" else rows
        kw["attn_mask"], sdpa_kw["attn_mask"] = rows, rows if rows.ndim == 2 else rows[:, None]
    elif case == "additive 4-D":
        additive = torch.where(keep, 0.0, -math.inf)[:, None, None, :]
        kw["attn_mask"], sdpa_kw["attn_mask"] = additive, additive
    elif case == "causal":
        kw["is_causal"] = sdpa_kw["is_causal"] = True
    elif case == "gqa":
        kw["enable_gqa"] = sdpa_kw["enable_gqa"] = True
    with attention_backend("pasa"):
        out = dispatch_attention_fn(q, k, v, **kw)
    want = _sdpa(q, k, v, **sdpa_kw)
    assert out.shape == q.shape and (out - want).abs().max().item() < 2e-3
    if case == "bool key padding":  # the mask arrived: batch 1 differs from the unmasked result
        with attention_backend("pasa"):
            free = dispatch_attention_fn(q, k, v)
        assert (free[1] - out[1]).abs().max() > 1e-2 and torch.equal(free[0], out[0])


def test_forward_op_returns_lse_in_diffusers_layout():
    q, k, v = _qkv()
    out, lse = pasa_diffusers._pasa_forward_op(None, q, k, v, return_lse=True)
    assert lse.shape == (2, 7, 4) and lse.dtype == torch.float32
    _, want = golden.reference(*(x.half().transpose(1, 2).numpy() for x in (q, k, v)), scale=0.25)
    assert (lse.transpose(1, 2).double() - torch.from_numpy(want)).abs().max() < 1e-2


def test_refusals_and_options():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="dropout_p must be 0"):
        with attention_backend("pasa"):
            dispatch_attention_fn(q, k, v, dropout_p=0.1)
    with pytest.raises(ValueError, match="precision must be one of"):
        register_backend(precision="fp64")
    # Options reach fused_attention: the all-FP16 allocation differs from pasa_fp32.
    with attention_backend("pasa"):
        a = dispatch_attention_fn(q, k, v)
        register_backend(precision="fp16")
        try:
            b = dispatch_attention_fn(q, k, v)
        finally:
            register_backend(precision="pasa_fp32")
    assert not torch.equal(a, b)


# ============================================================================================
# context parallelism, through diffusers' enable_parallelism
# ============================================================================================

def cp_worker(rank, world, configs):
    # diffusers 0.42.1's enable_parallelism places rank r on device r % torch.accelerator.device_count(),
    # which is 0 on a host without an accelerator; the CPU group needs no device of its own.
    torch.accelerator.device_count = lambda: 1
    calls = []
    real = pasa_diffusers.fused_attention

    def spy(*a, **kw):
        calls.append(kw["softmax_lse_flag"])
        return real(*a, **kw)

    pasa_diffusers.fused_attention = spy
    results = {}
    for ring, ulysses in configs:
        model, inputs = tiny_flux(), flux_inputs()
        model.set_attention_backend("pasa")
        with torch.no_grad():
            single = model(**inputs)[0]
            model.enable_parallelism(config=ContextParallelConfig(ring_degree=ring, ulysses_degree=ulysses))
            calls.clear()
            parallel = model(**inputs)[0]
        # diffusers gathers the output with a functional collective: a waitable tensor subclass
        # that torch.load's safe unpickler does not take.
        parallel = parallel.wait() if hasattr(parallel, "wait") else parallel
        results[ring, ulysses] = (single, parallel, list(calls))
    return results


@pytest.fixture(scope="module")
def cp_runs(tmp_path_factory):
    return {**launch(cp_worker, 2, tmp_path_factory.mktemp("cp2"), [(2, 1), (1, 2)])[0],
            **launch(cp_worker, 4, tmp_path_factory.mktemp("cp4"), [(2, 2)])[0]}


@pytest.mark.parametrize("ring, ulysses", [(2, 1), (1, 2), (2, 2)], ids=["ring", "ulysses", "ring x ulysses"])
def test_context_parallel_model_matches_one_process(cp_runs, ring, ulysses):
    single, parallel, calls = cp_runs[ring, ulysses]
    r = rel(parallel, single)
    print(f"flux, ring {ring} x ulysses {ulysses}: relative error against one process {r:.2e}")
    # 2 attention layers: the ring calls the forward op once per ring step with return_lse.
    assert len(calls) == 2 * ring and all(calls) == (ring > 1)
    if ring == 1:
        assert torch.equal(parallel, single)  # Ulysses only moves heads
    else:
        assert 0 < r < TOL  # partials merged through their lse: FP32 rounding of the merge and of FP16 partials


def test_ring_with_a_mask_is_refused():
    config = type("P", (), {"context_parallel_config": ContextParallelConfig(ring_degree=2)})()
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="no attn_mask with ring_degree > 1"):
        pasa_diffusers._pasa_forward_op(None, q, k, v, attn_mask=torch.ones(2, 9, dtype=torch.bool),
                                        _parallel_config=config)

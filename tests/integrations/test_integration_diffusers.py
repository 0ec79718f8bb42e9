"""diffusers integration: PasaAttnProcessor on tiny randomly initialised models (no download),
float32, CPU, against the default AttnProcessor2_0 (PyTorch SDPA). The only difference allowed
is the FP16 rounding of Q, K, V in pasa-npu: relative error of the model output <= 1e-3."""

from __future__ import annotations

import pytest
import torch

diffusers = pytest.importorskip("diffusers")

from diffusers.models.attention_processor import Attention, AttnProcessor2_0  # noqa: E402

from pasa_npu.integrations.diffusers import PasaAttnProcessor, install  # noqa: E402

TOL = 1e-3


def run(model, processor, **inputs):
    model.set_attn_processor(processor)
    with torch.no_grad():
        return model(**inputs).sample


def rel(a, b, label=None):
    """Relative L2 error; with a label it is also printed (pytest -s shows the measured values)."""
    r = ((a - b).norm() / b.norm()).item()
    if label:
        print(f"{label}: relative error {r:.2e}")
    return r


def called_modules(model, monkeypatch):
    """Names of the Attention modules PasaAttnProcessor is called for, filled during a forward."""
    names = {id(m): n for n, m in model.named_modules() if isinstance(m, Attention)}
    seen = set()
    real = PasaAttnProcessor.__call__

    def spy(self, attn, *a, **kw):
        seen.add(names[id(attn)])
        return real(self, attn, *a, **kw)

    monkeypatch.setattr(PasaAttnProcessor, "__call__", spy)
    return seen


def test_unet2d_self_and_cross_attention_with_mask(monkeypatch):
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        block_out_channels=(32, 64), layers_per_block=1, sample_size=16, in_channels=4, out_channels=4,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=32, attention_head_dim=8, norm_num_groups=32).eval()
    g = torch.Generator().manual_seed(1)
    inputs = dict(sample=torch.randn(2, 4, 16, 16, generator=g), timestep=torch.tensor([10, 500]),
                  encoder_hidden_states=torch.randn(2, 7, 32, generator=g))
    seen = called_modules(unet, monkeypatch)
    assert rel(run(unet, PasaAttnProcessor(), **inputs), run(unet, AttnProcessor2_0(), **inputs), "unet2d") < TOL
    assert any(n.endswith("attn1") for n in seen) and any(n.endswith("attn2") for n in seen)

    mask = torch.ones(2, 7)
    mask[1, 4:] = 0  # the last 3 text tokens of the second prompt are padding
    masked = run(unet, PasaAttnProcessor(), **inputs, encoder_attention_mask=mask)
    assert rel(masked, run(unet, AttnProcessor2_0(), **inputs, encoder_attention_mask=mask), "unet2d masked") < TOL
    unmasked = run(unet, PasaAttnProcessor(), **inputs)
    assert rel(masked[1], unmasked[1]) > 10 * TOL  # the mask arrived and changed the second sample
    assert rel(masked[0], unmasked[0]) < 1e-6


def test_svd_unet_temporal_attention(monkeypatch):
    from diffusers import UNetSpatioTemporalConditionModel

    torch.manual_seed(0)
    unet = UNetSpatioTemporalConditionModel(
        sample_size=16, in_channels=8, out_channels=4, block_out_channels=(32, 64), layers_per_block=1,
        down_block_types=("CrossAttnDownBlockSpatioTemporal", "DownBlockSpatioTemporal"),
        up_block_types=("UpBlockSpatioTemporal", "CrossAttnUpBlockSpatioTemporal"),
        addition_time_embed_dim=32, projection_class_embeddings_input_dim=96, cross_attention_dim=32,
        num_attention_heads=(8, 16), num_frames=3).eval()
    g = torch.Generator().manual_seed(1)
    inputs = dict(sample=torch.randn(1, 3, 8, 16, 16, generator=g), timestep=torch.tensor([10]),
                  encoder_hidden_states=torch.randn(1, 1, 32, generator=g), added_time_ids=torch.randn(1, 3, generator=g))
    seen = called_modules(unet, monkeypatch)
    assert rel(run(unet, PasaAttnProcessor(), **inputs), run(unet, AttnProcessor2_0(), **inputs), "svd unet") < TOL
    assert any("temporal_transformer_blocks" in n for n in seen)
    assert all(isinstance(p, PasaAttnProcessor) for p in (unet.set_attn_processor(PasaAttnProcessor()) or
                                                          unet.attn_processors.values()))


def test_dit_transformer():
    from diffusers import DiTTransformer2DModel

    torch.manual_seed(0)
    dit = DiTTransformer2DModel(num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4,
                                num_layers=2, sample_size=8, patch_size=2, norm_num_groups=32).eval()
    g = torch.Generator().manual_seed(1)
    inputs = dict(hidden_states=torch.randn(2, 4, 8, 8, generator=g), timestep=torch.tensor([3, 700]),
                  class_labels=torch.tensor([1, 5]))
    with torch.no_grad():
        ref = dit(**inputs).sample  # its default processor is AttnProcessor2_0
        assert install(dit) == 2 and all(isinstance(m.processor, PasaAttnProcessor)
                                         for m in dit.modules() if isinstance(m, Attention))
        assert rel(dit(**inputs).sample, ref, "dit") < TOL


def test_biased_keys_overflow_fp16_not_pasa():
    """One Attention module whose keys carry a bias in phase with the queries (scores near 96 000):
    precision 'fp16' gives NaN; 'pasa_fp32' and 'pasa' stay within 1% of exact arithmetic on the
    same FP16 inputs (precision 'fp32'; the shifted scores S' ~ 400 are rounded to FP16), which is
    within 3% of float32 SDPA: at this magnitude the FP16 rounding of Q and K alone moves the
    scores by about one unit."""
    torch.manual_seed(0)
    attn = Attention(query_dim=32, heads=2, dim_head=16).eval()
    u = torch.cos(torch.arange(32) * 0.7)
    with torch.no_grad():
        attn.to_q.weight.mul_(0.1)
        attn.to_k.weight.mul_(0.1)
        attn.to_q.bias = torch.nn.Parameter(200 * u)
        attn.to_k.bias = torch.nn.Parameter(60 * u)
        x = torch.randn(1, 40, 32)
        attn.set_processor(AttnProcessor2_0())
        ref = attn(x)
        attn.set_processor(PasaAttnProcessor(precision="fp16", safety_net=False))
        assert torch.isnan(attn(x)).all()
        attn.set_processor(PasaAttnProcessor(precision="fp32"))
        exact = attn(x)
        for p in ("pasa_fp32", "pasa"):  # measured 3.4e-3 and 3.7e-3: S' ~ 400 rounded to FP16
            attn.set_processor(PasaAttnProcessor(precision=p))
            assert rel(attn(x), exact, f"biased {p} vs fp32 allocation") < 1e-2, p
        assert rel(exact, ref, "biased fp32 allocation vs SDPA") < 3e-2


def test_soft_bias_mask_refused():
    attn = Attention(query_dim=16, heads=2, dim_head=8, processor=PasaAttnProcessor())
    x = torch.randn(1, 5, 16)
    with pytest.raises(ValueError, match="additive value"):
        attn(x, attention_mask=torch.full((1, 1, 5), -2.0))
    with pytest.raises(ValueError, match="precision"):
        PasaAttnProcessor(precision="bf16")

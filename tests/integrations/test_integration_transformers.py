"""transformers integration: register(), masks (causal, padding, additive), GQA without repeated K/V,
refusals. Tiny randomly initialised models (no download) against float32 eager attention."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("pasa_npu.integrations.transformers", exc_type=ImportError)  # says which versions it takes

import pasa_npu.integrations as integ  # noqa: E402
from pasa_npu.integrations import MASKED_BIAS, PasaSettings, fia_mask  # noqa: E402
from pasa_npu.integrations.transformers import make_attention_function, register  # noqa: E402


def tiny_llama(seed=0, **extra):
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, **extra)
    return LlamaModel(cfg).eval()


def hidden(model, impl, ids, mask):
    model.set_attn_implementation(impl)
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).last_hidden_state


def test_register_adds_attention_and_mask_function():
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    assert register("pasa_reg_check") == "pasa_reg_check"
    assert "pasa_reg_check" in AttentionInterface._global_mapping
    assert "pasa_reg_check" in AttentionMaskInterface._global_mapping


def test_gqa_causal_left_padding_matches_eager(monkeypatch):
    """A GQA decoder (4 query heads, 2 KV heads) with left padding: the valid positions match float32
    eager, K/V reach fused_attention with 2 heads (not repeated), and the mask holds both the causal
    and the padding pattern."""
    model = tiny_llama()
    ids = torch.randint(3, 97, (2, 11), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[1, :4] = 0  # left padding of the second sequence
    seen = []
    real = integ.fused_attention

    def spy(q, k, v, **kw):
        seen.append((q.shape[1], k.shape[1], kw["num_key_value_heads"], kw["atten_mask"]))
        return real(q, k, v, **kw)

    monkeypatch.setattr(integ, "fused_attention", spy)
    register("pasa_t_fp32", precision="fp32")
    ref = hidden(model, "eager", ids, mask)
    out = hidden(model, "pasa_t_fp32", ids, mask)
    valid = mask.bool()
    err = (out - ref)[valid].norm() / ref[valid].norm()
    assert err < 2e-3, err  # FP16 rounding of Q, K, V only
    assert len(seen) == 2 and all(n == 4 and nkv == 2 == kvh for n, nkv, kvh, _ in seen)
    m = seen[0][3]  # FIA mask: True = masked out
    assert m is not None and m.dtype == torch.bool
    i, j = torch.arange(11)[:, None], torch.arange(11)[None, :]
    expected = (j > i)[None].expand(2, -1, -1).clone()
    expected[1, :, :4] = True
    assert torch.equal(m[:, 0], expected)


def test_padding_mask_arrives_in_encoder():
    """A bidirectional encoder: a padded batch gives each sentence the result it gets alone, which
    fails if the padding mask were dropped."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=64, max_position_embeddings=32)).eval()
    register("pasa_t_pad")
    ids = torch.randint(3, 50, (2, 9), generator=torch.Generator().manual_seed(2))
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[0, 5:] = 0
    batch = hidden(model, "pasa_t_pad", ids, mask)
    alone = hidden(model, "pasa_t_pad", ids[:1, :5], mask[:1, :5])
    assert torch.allclose(batch[0, :5], alone[0], atol=1e-5)
    unmasked = hidden(model, "pasa_t_pad", ids[:1], torch.ones(1, 9, dtype=torch.long))
    assert not torch.allclose(unmasked[0, :5], alone[0], atol=1e-3)


def test_settings_reach_fused_attention(monkeypatch):
    got = {}

    def fake(q, k, v, **kw):
        got.update(kw)
        return torch.zeros(q.shape[0], q.shape[2], q.shape[1], q.shape[3]), None

    monkeypatch.setattr(integ, "fused_attention", fake)
    fn = make_attention_function(PasaSettings(precision="pasa", beta=0.9, block_kv=64))
    q = torch.randn(1, 2, 3, 8)
    out, weights = fn(torch.nn.Module(), q, q, q, None, scaling=0.5)
    assert out.shape == (1, 3, 2, 8) and weights is None
    assert (got["precision"], got["beta"], got["block_kv"], got["scale"]) == ("pasa", 0.9, 64, 0.5)
    assert got["input_layout"] == "BNSD_BSND"


def test_refusals():
    fn = make_attention_function(PasaSettings())
    q = torch.randn(1, 2, 3, 8)
    with pytest.raises(ValueError, match="dropout"):
        fn(torch.nn.Module(), q, q, q, None, dropout=0.1)
    with pytest.raises(ValueError, match="softcap"):
        fn(torch.nn.Module(), q, q, q, None, softcap=30.0)
    bad = q.clone()
    bad[0, 0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="earlier layer overflowed"):
        fn(torch.nn.Module(), bad, q, q, None)
    with pytest.raises(ValueError, match="precision"):
        register("pasa_bad", precision="fp8")
    with pytest.raises(ValueError, match="name"):
        register("a|b")


def test_dropout_in_training_mode_refused():
    model = tiny_llama(attention_dropout=0.1)
    register("pasa_t_drop")
    model.set_attn_implementation("pasa_t_drop")
    model.train()
    with pytest.raises(ValueError, match="dropout"):
        model(input_ids=torch.tensor([[5, 6, 7]]))


def test_fia_mask_conversion():
    keep = torch.tensor([[True, False, True]])
    assert torch.equal(fia_mask(keep), ~keep)
    lo = torch.finfo(torch.float16).min
    add = torch.tensor([[0.0, float("-inf"), lo, MASKED_BIAS, -1e9]])
    assert fia_mask(add).tolist() == [[False, True, True, True, True]]
    with pytest.raises(ValueError, match="additive value"):
        fia_mask(torch.tensor([[0.0, -3.0]]))
    with pytest.raises(ValueError):
        fia_mask(torch.tensor([[0.0, float("nan")]]))
    with pytest.raises(TypeError, match="bool or an additive float"):
        fia_mask(torch.tensor([[0, 1]]))


def test_package_imports_without_model_libraries():
    """pasa_npu, its integrations package, the scanner and the CLI import with transformers and
    diffusers unavailable."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('transformers', 'diffusers'):\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import pasa_npu, pasa_npu.integrations, pasa_npu.scan, pasa_npu.cli\n"
        "assert not any(m.split('.')[0] in ('transformers', 'diffusers') for m in sys.modules)\n"
        "try:\n"
        "    import pasa_npu.integrations.transformers\n"
        "except ImportError as e:\n"
        "    assert 'blocked' in str(e)\n"
        "else:\n"
        "    raise SystemExit('imported without transformers')\n")
    subprocess.run([sys.executable, "-c", code], check=True)

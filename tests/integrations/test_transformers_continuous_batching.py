"""transformers continuous batching (generate_batch) on pasa-npu: a tiny random Llama with GQA generates, for a batch
of prompts of different lengths, the greedy tokens transformers' own "sdpa" continuous batching generates, through
the packed form and through the paged decode form; the two forms' arguments as transformers makes them when it
pads (zero-length requests, padded rows) against float64 attention; refusals."""

from __future__ import annotations

import math

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("pasa_npu.integrations.transformers", exc_type=ImportError)  # says which versions it takes

from pasa_npu.integrations import PasaSettings  # noqa: E402
from pasa_npu.integrations import transformers as integ  # noqa: E402

PROMPTS = [[1, 2, 3, 4, 5], [6, 7], list(range(8, 26)), list(range(30, 70)), [99]]
NEW_TOKENS = 10


def tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    # initializer_range 0.2 (not 0.02): peaked logits and attention that matters, so that greedy decoding has
    # clear winners and the tokens depend on each key the attention sees.
    config = LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         initializer_range=0.2)
    return LlamaForCausalLM._from_config(config, attn_implementation="sdpa").eval()


def generate(model, decode_fast_path: bool):
    from transformers import ContinuousBatchingConfig, GenerationConfig

    generation = GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=-1, pad_token_id=0)
    cb = ContinuousBatchingConfig(page_size=16, num_blocks=24, max_batch_tokens=64, max_requests_per_batch=8,
                                  use_cuda_graph=False, allow_block_sharing=False,
                                  max_blocks_per_request=4 if decode_fast_path else 0)
    out = model.generate_batch(PROMPTS, generation_config=generation, continuous_batching_config=cb,
                               progress_bar=False)
    return [out[f"req_{i}"].generated_tokens for i in range(len(PROMPTS))]


@pytest.fixture(scope="module")
def sdpa_tokens():
    tokens = generate(tiny_llama(), decode_fast_path=False)
    assert all(len(t) == NEW_TOKENS for t in tokens)
    return tokens


@pytest.fixture
def forms(monkeypatch):
    """Counts the calls of each continuous-batching form of the attention function."""
    seen = {"packed": 0, "paged": 0}
    for form, name in (("packed", "_packed"), ("paged", "_paged_decode")):
        real = getattr(integ, name)

        def spy(*args, _real=real, _form=form, **kwargs):
            seen[_form] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(integ, name, spy)
    return seen


def test_generate_batch_matches_sdpa_packed(sdpa_tokens, forms):
    model = tiny_llama()
    assert integ.use_in_continuous_batching(model) == "pasa_flash"
    assert generate(model, decode_fast_path=False) == sdpa_tokens
    assert forms["packed"] > 0 and forms["paged"] == 0


def test_generate_batch_matches_sdpa_paged_decode(sdpa_tokens, forms, monkeypatch):
    """transformers enables its decode fast path only for FlashAttention 2/3 on CUDA and XPU; with the check
    bypassed it runs on the CPU and hands the function its own block tables and paged caches."""
    from transformers.generation.continuous_batching import initialization

    monkeypatch.setattr(initialization, "ensure_decode_fast_path_is_available", lambda *args: None)
    model = tiny_llama()
    integ.use_in_continuous_batching(model, precision="pasa_rs")
    assert generate(model, decode_fast_path=True) == sdpa_tokens
    assert forms["paged"] >= 2 * (NEW_TOKENS - 1) and forms["packed"] > 0


def test_tokens_depend_on_the_causal_mask(sdpa_tokens, monkeypatch):
    """The comparison above fails when the attention is wrong: without the causal rule (each request's queries
    seeing its later keys in prefill) the tokens differ."""
    real = integ.fused_attention

    def no_causal(*args, **kwargs):
        kwargs.pop("sparse_mode", None), kwargs.pop("atten_mask", None)
        return real(*args, **kwargs)

    monkeypatch.setattr(integ, "fused_attention", no_causal)
    model = tiny_llama()
    integ.use_in_continuous_batching(model)
    assert generate(model, decode_fast_path=False) != sdpa_tokens


def reference(q, k, v, scale, causal):
    """float64 attention of one request: (N, s1, D) queries, (Nkv, s2, D) keys, queries the last s1 keys."""
    q, k, v = q.double(), k.double(), v.double()
    rep = q.shape[0] // k.shape[0]
    k, v = k.repeat_interleave(rep, 0), v.repeat_interleave(rep, 0)
    s = scale * q @ k.transpose(-1, -2)
    if causal:
        s1, s2 = s.shape[-2:]
        s = s.masked_fill(torch.ones(s1, s2, dtype=torch.bool).triu(s2 - s1 + 1), -math.inf)
    return torch.softmax(s, -1) @ v


def test_packed_form_with_padding_matches_float64():
    """Requests of 3, 0 and 5 queries over 7, 0 and 9 keys, then two padded rows (transformers' CUDA-graph
    padding: zero-length requests, rows past the last one): each request's rows match float64 attention
    of its own queries and keys, padded rows are 0."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, n, t, 16, generator=g) for n, t in ((4, 10), (2, 18), (2, 18)))
    function = integ.make_attention_function(PasaSettings(precision="fp32"))
    module = torch.nn.Module()
    cu_q, cu_k = torch.tensor([0, 3, 3, 8, 8], dtype=torch.int32), torch.tensor([0, 7, 7, 16, 16], dtype=torch.int32)
    out, _ = function(module, q, k, v, None, scaling=0.25, is_causal=True, cu_seq_lens_q=cu_q, cu_seq_lens_k=cu_k,
                      max_length_q=5, max_length_k=9, block_table=None)
    assert out.shape == (1, 10, 4, 16)
    for (q0, q1), (k0, k1) in (((0, 3), (0, 7)), ((3, 8), (7, 16))):
        want = reference(q[0, :, q0:q1], k[0, :, k0:k1], v[0, :, k0:k1], 0.25, causal=True)
        got = out[0, q0:q1].transpose(0, 1).double()
        assert (got - want).norm() / want.norm() < 2e-3
    assert torch.equal(out[0, 8:], torch.zeros(2, 4, 16))


def test_paged_decode_form_writes_the_cache_and_matches_float64():
    """Three decoding requests (11, 16 and 1 keys, the new one included) and a padded one (length 0, table row
    of -1): the new key/value land in their slot of the paged cache, nothing else changes, and each request's
    output matches float64 attention over its keys."""
    g = torch.Generator().manual_seed(1)
    page, n_kv, d = 16, 2, 16
    k_cache, v_cache = (torch.randn(6, page, n_kv, d, generator=g) for _ in range(2))
    table = torch.tensor([[4, 1], [2, 5], [0, -1], [-1, -1]], dtype=torch.int32)
    lengths = [11, 16, 1, 0]
    cu_k = torch.tensor([0, 11, 27, 28, 28], dtype=torch.int32)
    q = torch.randn(1, 4, 4, d, generator=g)
    new_k, new_v = (torch.randn(1, n_kv, 4, d, generator=g) for _ in range(2))
    before_k, before_v = k_cache.clone(), v_cache.clone()
    function = integ.make_attention_function(PasaSettings(precision="fp32"))
    out, _ = function(torch.nn.Module(), q, new_k, new_v, None, scaling=0.25, is_causal=True,
                      cu_seq_lens_q=torch.arange(5, dtype=torch.int32), cu_seq_lens_k=cu_k, max_length_q=1,
                      max_length_k=1, block_table=table, k_cache=k_cache, v_cache=v_cache)
    assert out.shape == (1, 4, 4, d)
    slots = {(4, 10): 0, (2, 15): 1, (0, 0): 2}  # (page, offset) of each request's new token
    for (p, o), b in slots.items():
        assert torch.equal(k_cache[p, o], new_k[0, :, b]) and torch.equal(v_cache[p, o], new_v[0, :, b])
        before_k[p, o], before_v[p, o] = new_k[0, :, b], new_v[0, :, b]
    assert torch.equal(k_cache, before_k) and torch.equal(v_cache, before_v)
    for b, n in enumerate(lengths[:3]):
        rows = torch.cat([k_cache[p] for p in table[b] if p >= 0])[:n], torch.cat(
            [v_cache[p] for p in table[b] if p >= 0])[:n]
        want = reference(q[0, :, b:b + 1], rows[0].transpose(0, 1), rows[1].transpose(0, 1), 0.25, causal=False)
        got = out[0, b:b + 1].transpose(0, 1).double()
        assert (got - want).norm() / want.norm() < 2e-3
    assert torch.equal(out[0, 3], torch.zeros(4, d))


def test_refusals():
    model = tiny_llama()
    for name in ("pasa", "pasa_flash_2", "flash_attention_3"):
        with pytest.raises(ValueError, match="must contain 'flash'"):
            integ.use_in_continuous_batching(model, name)
    function = integ.make_attention_function(PasaSettings())
    x = torch.zeros(1, 2, 3, 16)
    cu = torch.tensor([0, 3], dtype=torch.int32)
    with pytest.raises(ValueError, match="sliding-window"):
        function(torch.nn.Module(), x, x, x, None, cu_seq_lens_q=cu, cu_seq_lens_k=cu, sliding_window=2)
    with pytest.raises(ValueError, match="batch of 1"):
        function(torch.nn.Module(), torch.zeros(2, 2, 3, 16), torch.zeros(2, 2, 3, 16), torch.zeros(2, 2, 3, 16),
                 None, cu_seq_lens_q=cu, cu_seq_lens_k=cu)

"""pasa_npu.patch_torch_npu on torch_npu's other attention entry points (npu_prompt_flash_attention,
npu_incre_flash_attention, npu_fusion_attention, the ATB ops), against a stand-in for torch_npu that records
every call reaching torch_npu's own ops. Each caller pattern (the arguments vllm-ascend, the op-plugin docs or a
diffusers-style DiT block pass) runs on pasa-npu and is checked against float64 attention computed here from
the entry point's documented semantics (not from the patch's translation), within 1.5x the error of an FP32
attention over 3 seeds; the patterns pasa-npu does not implement reach torch_npu with the caller's arguments
and a named reason. The call trace (``record=``) is written and read back."""

from __future__ import annotations

import math
import sys
import types

import numpy as np
import pytest
import torch

import pasa_npu
from pasa_npu import metrics
from pasa_npu.integrations import torch_npu as patch
from pasa_npu.integrations import trace

N, NKV, D, PAGE = 4, 2, 16, 16
SEEDS = (0, 1, 2)


class FakeOp:
    """One of torch_npu's ops: records each call reaching it as (name, args, kwargs), returns a marker."""

    def __init__(self, name: str, calls: list):
        self.name, self.calls = name, calls

    def __call__(self, *args, **kwargs):
        self.calls.append((self.name, args, kwargs))
        return ("torch_npu", self.name)


@pytest.fixture
def fake(monkeypatch):
    """A stand-in torch_npu with the entry points, torch.ops.npu and torch.ops.atb holding the same ops, as
    torch_npu has them (its ATB functions are torch.ops.atb's once the ATB library is loaded)."""
    calls: list = []
    ops = {e.op: FakeOp(e.op, calls) for e in patch.ENTRIES}
    module = types.ModuleType("torch_npu")
    for name, op in ops.items():
        setattr(module, name, op)
    monkeypatch.setitem(sys.modules, "torch_npu", module)
    atb = {e.op: ops[e.op] for e in patch.ENTRIES if e.ops == "atb"}
    monkeypatch.setattr(torch.ops, "npu", types.SimpleNamespace(**{n: o for n, o in ops.items() if n not in atb}))
    monkeypatch.setattr(torch.ops, "atb", types.SimpleNamespace(**atb), raising=False)
    pasa_npu.patch_torch_npu()
    yield types.SimpleNamespace(module=module, ops=ops, calls=calls)
    pasa_npu.unpatch_torch_npu()


def rand(g, *shape, mean=0.0):
    return (torch.randn(*shape, generator=g) + mean).half()


def attend(q, k, v, scale, hidden=None, dtype=torch.float64):
    """softmax(scale·q kᵀ, hidden keys removed) v in ``dtype``: q (N, r, D), k/v (Nkv, c, D), hidden (r, c)."""
    q, k, v = (t.to(dtype) for t in (q, k, v))
    g = q.shape[0] // k.shape[0]
    s = scale * q @ k.repeat_interleave(g, 0).transpose(1, 2)
    if hidden is not None:
        s = s.masked_fill(hidden, -math.inf)
    return torch.softmax(s, -1) @ v.repeat_interleave(g, 0)


def causal(r, c):
    """Bottom-right causal: query i of r (the last r of c positions) hides keys j > c - r + i."""
    return torch.arange(c)[None, :] > (c - r + torch.arange(r))[:, None]


def paged(g, lens, mean=1.0):
    """vllm-ascend's caches (num_blocks, page, Nkv, D) with each sequence's pages shuffled, its int32 table,
    and each sequence's keys/values (Nkv, c, D)."""
    pages = [-(-c // PAGE) for c in lens]
    blocks = sum(pages) + 1
    kc, vc = rand(g, blocks, PAGE, NKV, D, mean=mean), rand(g, blocks, PAGE, NKV, D)
    order = torch.randperm(blocks, generator=g)
    table = torch.zeros(len(lens), max(pages), dtype=torch.int32)
    at, dense = 0, []
    for b, (p, c) in enumerate(zip(pages, lens)):
        table[b, :p] = order[at:at + p].int()
        at += p
        dense.append(tuple(t[table[b, :p].long()].reshape(-1, NKV, D)[:c].transpose(0, 1) for t in (kc, vc)))
    return kc, vc, table, dense


# --------------------------------------------------------------------------------------------
# caller patterns: (args, kwargs, reference(dtype) -> expected output, the output to compare)
# --------------------------------------------------------------------------------------------

def pfa_vit(g):
    """vllm-ascend's rel_pos_attention (a ViT image encoder): BNSD, no mask, scale_value, num_heads."""
    q, k, v = rand(g, 2, N, 24, D), rand(g, 2, N, 24, D, mean=2.0), rand(g, 2, N, 24, D)
    kw = dict(input_layout="BNSD", scale_value=D ** -0.5, num_heads=N)
    return (q, k, v), kw, lambda dt: torch.stack([attend(q[b], k[b], v[b], D ** -0.5, dtype=dt) for b in range(2)])


def pfa_causal_bsh(g):
    """A PFA prefill as the op-plugin docs call it: BSH, GQA, a causal mask with PFA's default next_tokens 0
    (sparse mode 0: the band from the top-left corner), per-batch query and key lengths."""
    q, k, v = rand(g, 2, 20, N * D), rand(g, 2, 20, NKV * D, mean=1.0), rand(g, 2, 20, NKV * D)
    mask = torch.triu(torch.ones(20, 20, dtype=torch.bool), 1)
    kw = dict(atten_mask=mask, actual_seq_lengths=[20, 13], actual_seq_lengths_kv=[20, 13], num_heads=N,
              num_key_value_heads=NKV, scale_value=D ** -0.5, input_layout="BSH")

    def ref(dt):
        out = torch.zeros(2, N, 20, D, dtype=dt)
        for b, n in enumerate((20, 13)):
            qq, kk, vv = (t[b, :n].view(n, -1, D).transpose(0, 1) for t in (q, k, v))
            out[b, :, :n] = attend(qq, kk, vv, D ** -0.5, causal(n, n), dt)
        return out.transpose(1, 2).reshape(2, 20, N * D)
    return (q, k, v), kw, ref


def ifa_paged(g):
    """IFA's PageAttention decode: BSH queries, caches (blocks, page, H), actual_seq_lengths = key lengths."""
    lens = [40, 17, 33]
    kc, vc, table, dense = paged(g, lens)
    q = rand(g, 3, 1, N * D)
    kw = dict(actual_seq_lengths=lens, block_table=table, num_heads=N, num_key_value_heads=NKV,
              scale_value=D ** -0.5, input_layout="BSH", block_size=PAGE)
    args = (q, kc.view(kc.shape[0], PAGE, -1), vc.view(vc.shape[0], PAGE, -1))
    return args, kw, lambda dt: torch.stack([attend(q[b].view(1, N, D).transpose(0, 1), *dense[b], D ** -0.5,
                                                    dtype=dt).reshape(1, N * D) for b in range(3)])


def ifa_masked(g):
    """The op-plugin docs' IFA: BSH decode over dense keys with a (B, 1, 1, S) bool mask."""
    q, k, v = rand(g, 2, 1, N * D), rand(g, 2, 30, N * D, mean=1.5), rand(g, 2, 30, N * D)
    mask = torch.rand(2, 1, 1, 30, generator=g) < 0.3
    kw = dict(num_heads=N, input_layout="BSH", scale_value=D ** -0.5, atten_mask=mask)
    return (q, k, v), kw, lambda dt: torch.stack([attend(
        q[b].view(1, N, D).transpose(0, 1), k[b].view(30, N, D).transpose(0, 1), v[b].view(30, N, D).transpose(0, 1),
        D ** -0.5, mask[b, 0], dt).transpose(0, 1).reshape(1, N * D) for b in range(2)])


def fa_dit(g):
    """A diffusers / Open-Sora-style DiT block: BSND, head_num = query.size(2), no mask, the tokens 65536,
    keep_prob 1, keywords as those codes pass them; the output is the first of the 7 results."""
    q, k, v = rand(g, 2, 48, N, D), rand(g, 2, 48, N, D, mean=3.0), rand(g, 2, 48, N, D)
    kw = dict(atten_mask=None, input_layout="BSND", scale=D ** -0.5, pre_tockens=65536, next_tockens=65536,
              keep_prob=1.0, sync=False, inner_precise=0)
    return (q, k, v, q.size(2)), kw, lambda dt: torch.stack(
        [attend(*(t[b].transpose(0, 1) for t in (q, k, v)), D ** -0.5, dtype=dt).transpose(0, 1) for b in range(2)])


def fa_encoder_tnd(g):
    """vllm-ascend's encoder attention: TND, cumulative lengths padded by a trailing 0 (a batch it skips),
    no mask (sparse mode 0), head_num by keyword."""
    q, k, v = rand(g, 30, N, D), rand(g, 30, N, D, mean=1.0), rand(g, 30, N, D)
    cum = [12, 28, 0]
    kw = dict(query=q, key=k, value=v, head_num=N, input_layout="TND", scale=D ** -0.5, actual_seq_qlen=cum,
              actual_seq_kvlen=cum)

    def ref(dt):
        out = torch.zeros(30, N, D, dtype=dt)
        for a, b in ((0, 12), (12, 28)):
            out[a:b] = attend(*(t[a:b].transpose(0, 1) for t in (q, k, v)), D ** -0.5, dtype=dt).transpose(0, 1)
        return out[:28]
    return (), kw, ref


def fa_prefill_tnd(g):
    """vllm-ascend's large-head prefill: TND, GQA, sparse mode 3 with the compressed 2048 mask."""
    q, k, v = rand(g, 25, N, D), rand(g, 40, NKV, D, mean=1.0), rand(g, 40, NKV, D)
    mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)
    kw = dict(query=q, key=k, value=v, head_num=N, input_layout="TND", atten_mask=mask, scale=D ** -0.5,
              pre_tockens=2147483647, next_tockens=0, actual_seq_qlen=[10, 25], actual_seq_kvlen=[20, 40],
              sparse_mode=3)

    def ref(dt):
        out = torch.zeros(25, N, D, dtype=dt)
        for (a, b), (c, e) in zip(((0, 10), (10, 25)), ((0, 20), (20, 40))):
            out[a:b] = attend(q[a:b].transpose(0, 1), k[c:e].transpose(0, 1), v[c:e].transpose(0, 1), D ** -0.5,
                              causal(b - a, e - c), dt).transpose(0, 1)
        return out
    return (), kw, ref


def atb_decode(g):
    """vllm-ascend's forward_paged_attention: _npu_paged_attention by keyword into its output tensor."""
    lens = [40, 7, 64, 1]
    kc, vc, table, dense = paged(g, lens)
    q, out = rand(g, 4, N, D), torch.zeros(4, N, D, dtype=torch.float16)
    kw = dict(query=q, key_cache=kc, value_cache=vc, num_kv_heads=NKV, num_heads=N, scale_value=D ** -0.5,
              block_table=table, context_lens=torch.tensor(lens, dtype=torch.int32), out=out)
    return (), kw, lambda dt: torch.stack([attend(q[b][:, None], *dense[b], D ** -0.5, dtype=dt)[:, 0]
                                           for b in range(4)])


def atb_decode_sglang(g):
    """SGLang's default decode: _npu_paged_attention on one layer of its (2, layers, pages, page, Nkv, D) KV
    buffer (page 0 a dummy), the key lengths an int32 CPU tensor made from NumPy."""
    lens = [33, 16, 2]
    pages = [-(-c // PAGE) for c in lens]
    buffer = rand(g, 2, 3, sum(pages) + 1, PAGE, NKV, D, mean=1.0)
    kc, vc = buffer[0][1], buffer[1][1]
    table = torch.zeros(3, max(pages), dtype=torch.int32)
    order = (torch.randperm(sum(pages), generator=g) + 1).int()
    dense, at = [], 0
    for b, (p, c) in enumerate(zip(pages, lens)):
        table[b, :p] = order[at:at + p]
        at += p
        dense.append(tuple(t[table[b, :p].long()].reshape(-1, NKV, D)[:c].transpose(0, 1) for t in (kc, vc)))
    q = rand(g, 3, N * D)
    kw = dict(query=q.reshape(-1, N, D), key_cache=kc, value_cache=vc, num_heads=N, num_kv_heads=NKV,
              scale_value=D ** -0.5, block_table=table,
              context_lens=torch.from_numpy(np.array(lens).astype(np.int32)),
              out=torch.empty(3, N, D, dtype=torch.float16))
    return (), kw, lambda dt: torch.stack([attend(q[b].view(N, 1, D), *dense[b], D ** -0.5, dtype=dt)[:, 0]
                                           for b in range(3)])


def _chunked(g, mask_of):
    """A chunked-prefill step over the cache: (query rows, keys) per sequence, TND queries."""
    q_lens, kv_lens = [5, 1, 12], [37, 20, 12]
    kc, vc, table, dense = paged(g, kv_lens)
    q, out = rand(g, sum(q_lens), N, D), torch.zeros(sum(q_lens), N, D, dtype=torch.float16)
    kw = dict(query=q, key_cache=kc, value_cache=vc, block_table=table, mask=mask_of(q_lens, kv_lens),
              seq_len=torch.tensor(q_lens, dtype=torch.int32), context_lens=torch.tensor(kv_lens, dtype=torch.int32),
              num_kv_heads=NKV, num_heads=N, scale_value=D ** -0.5, out=out)

    def ref(dt):
        rows, at = [], 0
        for b, (r, c) in enumerate(zip(q_lens, kv_lens)):
            rows.append(attend(q[at:at + r].transpose(0, 1), *dense[b], D ** -0.5, causal(r, c), dt).transpose(0, 1))
            at += r
        return torch.cat(rows)
    return (), kw, ref


def additive_causal(size, dtype=torch.float16):
    """vllm-ascend's additive causal mask (0 kept, -inf hidden)."""
    return torch.zeros(size, size, dtype=dtype).masked_fill_(torch.triu(torch.ones(size, size, dtype=torch.bool), 1),
                                                             -math.inf)


def atb_qlens(g):
    """vllm-ascend's prefix-cache hit before CANN 8.3: _npu_flash_attention_qlens with its causal mask."""
    return _chunked(g, lambda q_lens, kv_lens: additive_causal(64))


def atb_splitfuse(g):
    """vllm-ascend's chunked prefill before CANN 8.3: _npu_paged_attention_splitfuse with the causal mask's
    rows at each query token's position (bfloat16's factor -10000 on the mask of 1s)."""
    def rows(q_lens, kv_lens):
        position = torch.tensor([p for r, c in zip(q_lens, kv_lens) for p in range(c - r, c)])
        return (torch.triu(torch.ones(64, 64), 1) * -10000.0).index_select(0, position)[:, :max(kv_lens)]
    return _chunked(g, rows)


def atb_qlens_sglang(g):
    """SGLang's prefill (forward_extend without FIA): _npu_flash_attention_qlens on (tokens, N·D) queries into
    a (tokens, N·D) output, its 128 × 128 compressed mask (bfloat16 models: 1 marks the triangle)."""
    args, kw, ref = _chunked(g, lambda q_lens, kv_lens: torch.triu(torch.ones(128, 128), 1).bfloat16())
    t = kw["query"].shape[0]
    kw = dict(kw, query=kw["query"].reshape(t, -1), out=torch.empty(t, N * D, dtype=torch.float16))
    return args, kw, lambda dt: ref(dt).reshape(t, -1)


PATTERNS = {
    "npu_prompt_flash_attention": [pfa_vit, pfa_causal_bsh],
    "npu_incre_flash_attention": [ifa_paged, ifa_masked],
    "npu_fusion_attention": [fa_dit, fa_encoder_tnd, fa_prefill_tnd],
    "_npu_paged_attention": [atb_decode, atb_decode_sglang],
    "_npu_flash_attention_qlens": [atb_qlens, atb_qlens_sglang],
    "_npu_paged_attention_splitfuse": [atb_splitfuse],
}
CASES = [(op, p) for op, ps in PATTERNS.items() for p in ps]


def _run(fake, op, args, kwargs):
    result = getattr(fake.module, op)(*args, **kwargs)
    if op.startswith("_npu"):
        assert result is None
        return kwargs["out"]
    if op == "npu_fusion_attention":
        assert len(result) == 7
        return result[0][:28] if kwargs.get("actual_seq_qlen") == [12, 28, 0] else result[0]
    return result


@pytest.mark.parametrize("op, pattern", CASES, ids=[p.__name__ for _, p in CASES])
def test_caller_pattern_runs_on_pasa_within_fp32_error(fake, op, pattern):
    errors, errors32 = [], []
    for seed in SEEDS:
        args, kwargs, ref = pattern(torch.Generator().manual_seed(seed))
        got = _run(fake, op, args, kwargs)
        f64 = ref(torch.float64)
        errors.append(metrics.rmse(got, f64))
        errors32.append(metrics.rmse(ref(torch.float32).half(), f64))
    assert fake.calls == []
    assert pasa_npu.torch_npu_routes() == {(f"torch_npu.{op}", "pasa-npu", ""): len(SEEDS)}
    assert 0 < sum(errors) <= 1.5 * sum(errors32), (errors, errors32)


def test_the_routers_stand_in_torch_ops_too(fake):
    """vllm-ascend calls torch_npu's functions, SGLang torch.ops.npu's; torch_npu's ATB functions become
    torch.ops.atb's ops once loaded: each of those names runs the call on pasa-npu."""
    args, kwargs, _ = atb_decode(torch.Generator().manual_seed(0))
    torch.ops.atb._npu_paged_attention(*args, **kwargs)
    args, kwargs, _ = fa_dit(torch.Generator().manual_seed(0))
    torch.ops.npu.npu_fusion_attention(*args, **kwargs)
    assert fake.calls == [] and set(pasa_npu.torch_npu_routes()) == {
        ("torch_npu._npu_paged_attention", "pasa-npu", ""), ("torch_npu.npu_fusion_attention", "pasa-npu", "")}


def test_atb_functions_stay_routed_when_torch_npu_loads_the_atb_library(fake, monkeypatch):
    """torch_npu's ATB functions are lazy: the first call of any of them loads the ATB library and sets
    torch_npu's attributes to torch.ops.atb's ops. The patch stands in both places, so calls stay routed after
    that, and a declined call reaches torch.ops.atb's op once (not through the lazy function again)."""
    pasa_npu.unpatch_torch_npu()
    atb = [e.op for e in patch.ENTRIES if e.ops == "atb"]

    def lazy(*args, **kwargs):  # torch_npu's loader: re-point every ATB function, then call
        for op in atb:
            setattr(fake.module, op, getattr(torch.ops.atb, op))
        return getattr(torch.ops.atb, "_npu_paged_attention")(*args, **kwargs)

    for op in atb:
        monkeypatch.setattr(fake.module, op, lazy)
    pasa_npu.patch_torch_npu()
    for op in atb:  # another ATB function loaded the library
        setattr(fake.module, op, getattr(torch.ops.atb, op))
    args, kwargs, _ = atb_decode(torch.Generator().manual_seed(0))
    fake.module._npu_paged_attention(*args, **kwargs)
    assert fake.calls == []
    kwargs["value_cache"] = kwargs["value_cache"][..., :8]
    assert fake.module._npu_paged_attention(**kwargs) == ("torch_npu", "_npu_paged_attention")
    assert [c[0] for c in fake.calls] == ["_npu_paged_attention"]
    assert pasa_npu.torch_npu_routes() == {("torch_npu._npu_paged_attention", "pasa-npu", ""): 1,
                                           ("torch_npu._npu_paged_attention", "torch_npu", "arguments"): 1}
    pasa_npu.unpatch_torch_npu()
    assert all(getattr(fake.module, op) is lazy and getattr(torch.ops.atb, op) is fake.ops[op] for op in atb)


def test_fusion_attention_returns_torch_npus_seven_results(fake):
    """Shapes and dtypes as torch_npu's: softmax_max/sum float32 (..., 8), TND laid out N-major unless
    softmax_layout="TND"; max + log(sum) is the row's log-sum-exp (float64's); softmax_out empty; seed and
    offset 0, numels the elements of the scores (B·N·S1·S2, TND N·Σ rows·keys). SBH (positional head_num and
    layout) gives the BSND call's results with its first two axes swapped."""
    g = torch.Generator().manual_seed(3)
    (q, k, v, heads), kw, _ = fa_dit(g)
    out, smax, ssum, sout, seed, offset, numels = fake.module.npu_fusion_attention(q, k, v, heads, **kw)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert smax.shape == ssum.shape == (2, N, 48, 8) and smax.dtype == ssum.dtype == torch.float32
    assert sout.shape == (0,) and sout.dtype == q.dtype and (seed, offset, numels) == (0, 0, 2 * N * 48 * 48)
    s = D ** -0.5 * q.double().transpose(1, 2) @ k.double().permute(0, 2, 3, 1)
    lse = torch.logsumexp(s, -1)
    assert torch.allclose((smax + ssum.log()).double(), lse[..., None].expand(-1, -1, -1, 8), atol=1e-3)
    sbh = fake.module.npu_fusion_attention(*(t.flatten(2).transpose(0, 1) for t in (q, k, v)), heads, "SBH",
                                           scale=D ** -0.5)
    assert torch.equal(sbh[0], out.flatten(2).transpose(0, 1)) and torch.equal(sbh[1], smax)
    _, kw, _ = fa_prefill_tnd(g)
    results = [fake.module.npu_fusion_attention(**kw, softmax_layout=layout) for layout in ("", "TND")]
    (_, ntd, *_), (_, tnd, *_, numels) = results
    assert ntd.shape == tnd.shape == (25, N, 8)
    assert torch.equal(ntd.view(N, 25, 8), tnd.permute(1, 0, 2))
    assert numels == N * (10 * 20 + 15 * 20)


def declined():
    """(name, op, call(g) -> (args, kwargs), reason category) of calls pasa-npu hands to torch_npu."""
    def fa(**extra):
        def call(g):
            args, kw, _ = fa_dit(g)
            return args, {**kw, **extra}
        return call

    def grad(g):
        args, kw, _ = fa_dit(g)
        return (args[0].float().requires_grad_(), *args[1:]), kw

    def mla_decode(g):  # vllm-ascend's MLA-style cache: values narrower than keys
        args, kw, _ = atb_decode(g)
        return args, {**kw, "value_cache": kw["value_cache"][..., :8]}

    def other_mask(g):
        args, kw, _ = atb_splitfuse(g)
        return args, {**kw, "mask": torch.zeros_like(kw["mask"])}

    def ifa_two_rows(g):
        args, kw, _ = ifa_masked(g)
        return (torch.cat([args[0]] * 2, 1), *args[1:]), {**kw, "atten_mask": None}

    def pfa(**extra):
        def call(g):
            args, kw, _ = pfa_vit(g)
            return args, {**kw, **extra}
        return call

    return [
        ("training forward", "npu_fusion_attention", grad, "gradient"),
        ("dropout", "npu_fusion_attention", fa(keep_prob=0.9), "keep_prob"),
        ("varlen split mode", "npu_fusion_attention", fa(sparse_mode=7, atten_mask=torch.ones(1, dtype=torch.bool)),
         "sparse_mode"),
        ("sink", "npu_fusion_attention", fa(sink=torch.zeros(N)), "sink"),
        ("pse", "npu_fusion_attention", fa(pse=torch.zeros(1)), "pse"),
        ("MLA head sizes", "_npu_paged_attention", mla_decode, "arguments"),
        ("not a causal mask", "_npu_paged_attention_splitfuse", other_mask, "mask"),
        ("IFA of two rows", "npu_incre_flash_attention", ifa_two_rows, "query rows"),
        ("PFA relative position bias", "npu_prompt_flash_attention", pfa(pse_shift=torch.zeros(1)), "pse_shift"),
        ("PFA int8 output", "npu_prompt_flash_attention", pfa(quant_scale2=torch.ones(1)), "quant_scale2"),
        ("unknown argument", "npu_incre_flash_attention", lambda g: (ifa_masked(g)[0], dict(
            ifa_masked(g)[1], future_option=1)), "arguments"),
    ]


@pytest.mark.parametrize("name, op, call, category", declined(), ids=[d[0] for d in declined()])
def test_declined_call_reaches_torch_npu_unchanged(fake, name, op, call, category):
    args, kwargs = call(torch.Generator().manual_seed(5))
    assert getattr(fake.module, op)(*args, **kwargs) == ("torch_npu", op)
    (called, got_args, got), = fake.calls
    assert called == op and all(a is b for a, b in zip(got_args, args)) and len(got_args) == len(args)
    assert got.keys() == kwargs.keys() and all(got[key] is kwargs[key] for key in kwargs)
    assert pasa_npu.torch_npu_routes() == {(f"torch_npu.{op}", "torch_npu", category): 1}


def test_the_trace_records_what_each_call_was_and_where_it_went(fake, tmp_path):
    """patch_torch_npu(record=PATH) writes each call; trace.read gives it back: the route, the lengths and
    tables as they were, every other tensor made by the reader from its recorded shape and dtype."""
    path = tmp_path / "calls.jsonl"
    pasa_npu.patch_torch_npu(record=path)
    g = torch.Generator().manual_seed(0)
    _, kw, _ = atb_splitfuse(g)
    fake.module._npu_paged_attention_splitfuse(**kw)
    fake.module.npu_fusion_attention(*fa_dit(g)[0], keep_prob=0.5, input_layout="BSND")
    made = []

    def make(name, spec, device):
        made.append((name, spec["shape"], spec["dtype"]))
        return torch.zeros(spec["shape"], dtype=getattr(torch, spec["dtype"]), device=device)

    first, second = trace.read(path, make)
    assert (first.op, first.ran, first.reason) == ("_npu_paged_attention_splitfuse", "pasa-npu", "")
    assert torch.equal(first.kwargs["block_table"], kw["block_table"])
    assert first.kwargs["seq_len"].tolist() == [5, 1, 12] and first.kwargs["num_heads"] == N
    assert ("query", [18, N, D], "float16") in made and ("mask", list(kw["mask"].shape), "float32") in made
    assert (second.op, second.ran, second.reason, second.args[3]) == ("npu_fusion_attention", "torch_npu",
                                                                      "keep_prob", N)
    path.write_text('{"format": "something else"}\n')
    with pytest.raises(ValueError, match="is not a pasa-npu torch_npu call trace"):
        list(trace.read(path, make))


def test_bench_serving_replays_a_recorded_trace_on_the_cpu(fake, tmp_path, monkeypatch):
    """scripts/bench_serving.py --replay (its CPU smoke check): every call the trace says ran on pasa-npu is
    rebuilt and timed through the patched entry point, against fused_attention on its FIA call and SDPA; the
    declined call is listed with its reason, untimed."""
    import importlib.util
    import json
    from pathlib import Path

    path = tmp_path / "calls.jsonl"
    pasa_npu.patch_torch_npu(record=path)
    g = torch.Generator().manual_seed(0)
    for pattern in (atb_splitfuse, atb_decode, fa_prefill_tnd, ifa_paged):
        args, kwargs, _ = pattern(g)
        _run(fake, {atb_splitfuse: "_npu_paged_attention_splitfuse", atb_decode: "_npu_paged_attention",
                    fa_prefill_tnd: "npu_fusion_attention", ifa_paged: "npu_incre_flash_attention"}[pattern],
             args, kwargs)
    fake.module.npu_fusion_attention(*fa_dit(g)[0], keep_prob=0.5, input_layout="BSND")
    pasa_npu.unpatch_torch_npu()
    script = Path(__file__).parents[2] / "scripts" / "bench_serving.py"
    spec = importlib.util.spec_from_file_location("bench_serving", script)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setitem(sys.modules, "torch_npu", fake.module)  # the replay installs its own stand-in
    bench.main(["--replay", str(path), "--out", str(tmp_path / "out"), "--device", "cpu", "--repeats", "1"])
    rows = json.loads((tmp_path / "out" / "results.json").read_text())["rows"]
    assert [r["entry"].split(".")[1] for r in rows] == ["_npu_paged_attention_splitfuse", "_npu_paged_attention",
                                                       "npu_fusion_attention", "npu_incre_flash_attention",
                                                       "npu_fusion_attention"]
    assert all(set(r["us"]) == {"entry", "fia", "sdpa"} and min(r["us"].values()) > 0 for r in rows[:4])
    assert "us" not in rows[4] and rows[4]["reason"] == "keep_prob"
    assert "| keep_prob (torch_npu) |" in (tmp_path / "out" / "README.md").read_text()

"""pasa_npu.patch_torch_npu against a stand-in for torch_npu that records every call reaching torch_npu's own
functions: the calls pasa-npu takes run on pasa-npu (their results equal a direct call of pasa-npu's function with
the same arguments) and never reach torch_npu; every other call reaches torch_npu with the caller's arguments,
the same objects; each route is reported once. The call shapes are those vllm-ascend and SGLang make."""

from __future__ import annotations

import logging
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

import pasa_npu
from pasa_npu.integrations import torch_npu as patch


V1, V2 = patch.V1.op, patch.V2.op
WS1, WS2 = patch.V1.workspace_op, patch.V2.workspace_op


class FakeOp:
    """Stands in for one of torch_npu's entry points (an OpOverloadPacket): records each call that reaches it
    as (name, args, kwargs) and returns a marker, its ``out`` tensors or, for a workspace query, a new tensor."""

    def __init__(self, name: str, calls: list):
        self.name, self.calls = name, calls
        self.schema_marker = f"schema of {name}"

    def __call__(self, *args, **kwargs):
        self.calls.append((self.name, args, kwargs))
        if "workspace" in self.name:
            return torch.empty(64, dtype=torch.uint8)
        return ("torch_npu", self.name)

    def out(self, *args, **kwargs):
        self.calls.append((self.name + ".out", args, kwargs))
        return tuple(kwargs["out"])


@pytest.fixture
def fake(monkeypatch):
    """A stand-in torch_npu module and torch.ops.npu namespace holding the same FakeOps (as in torch_npu, whose
    functions are torch.ops.npu's), patched by pasa-npu for the test and restored after it."""
    calls: list = []
    ops = {name: FakeOp(name, calls) for name in (V1, V2, WS1, WS2)}
    module = types.ModuleType("torch_npu")
    for name, op in ops.items():
        setattr(module, name, op)
    monkeypatch.setitem(sys.modules, "torch_npu", module)
    monkeypatch.setattr(torch.ops, "npu", types.SimpleNamespace(**ops))
    pasa_npu.patch_torch_npu()
    yield types.SimpleNamespace(module=module, ops=ops, calls=calls)
    pasa_npu.unpatch_torch_npu()


def gen(seed):
    return torch.Generator().manual_seed(seed)


def rand(*shape, seed=0, dtype=torch.float16):
    return torch.randn(*shape, generator=gen(seed)).to(dtype)


COMPRESSED = torch.ones(2048, 2048, dtype=torch.bool).triu_(1)


def paged_cache(lengths, n_kv=2, d=16, page=16, seed=1):
    """SGLang/vllm-ascend's cache: (num_blocks, page, Nkv·D) caches, a shuffled int32 table."""
    pages = [-(-n // page) for n in lengths]
    blocks = sum(pages) + 2
    k_cache, v_cache = rand(blocks, page, n_kv * d, seed=seed), rand(blocks, page, n_kv * d, seed=seed + 1)
    order = torch.randperm(blocks, generator=gen(seed + 2))
    table = torch.full((len(lengths), max(pages)), -1, dtype=torch.int32)
    at = 0
    for b, p in enumerate(pages):
        table[b, :p] = order[at:at + p].int()
        at += p
    return k_cache, v_cache, table


def supported_calls():
    """(name, args, kwargs) of calls pasa-npu takes today, as serving callers make them."""
    k_cache, v_cache, table = paged_cache([20, 33])
    return [
        # vllm-ascend, prefill without cache: TND, cumulative lengths, causal from the bottom-right corner
        ("TND prefill", (rand(12, 4, 16, seed=3), rand(12, 2, 16, seed=4), rand(12, 2, 16, seed=5)),
         dict(atten_mask=COMPRESSED, input_layout="TND", actual_seq_lengths=[5, 12], actual_seq_lengths_kv=[5, 12],
              num_key_value_heads=2, num_heads=4, scale=0.25, sparse_mode=3, next_tokens=0)),
        # SGLang's FIA decode: BSND, PageAttention over (blocks, page, Nkv·D) caches
        ("BSND paged decode", (rand(2, 1, 4, 16, seed=6), k_cache, v_cache),
         dict(num_heads=4, num_key_value_heads=2, input_layout="BSND", atten_mask=None, block_size=16,
              block_table=table, actual_seq_lengths_kv=[20, 33], scale=0.25)),
        # GQA with the lse, keywords for query/key/value, lengths as a NumPy array (SGLang's np.arange)
        ("BNSD lse", (), dict(query=rand(2, 4, 8, 16, seed=7), key=rand(2, 2, 10, 16, seed=8),
                              value=rand(2, 2, 10, 16, seed=9), num_heads=4, num_key_value_heads=2,
                              input_layout="BNSD", actual_seq_lengths_kv=np.array([10, 7]), scale=0.3,
                              softmax_lse_flag=True)),
    ]


@pytest.mark.parametrize("name, args, kwargs", supported_calls(), ids=[c[0] for c in supported_calls()])
@pytest.mark.parametrize("namespace", ["torch_npu", "torch.ops.npu"])
def test_supported_call_runs_on_pasa(fake, name, args, kwargs, namespace):
    op = getattr(fake.module if namespace == "torch_npu" else torch.ops.npu, V1)
    out, lse = op(*args, **kwargs)
    direct = dict(zip(("query", "key", "value"), args), **kwargs)
    if isinstance(direct["actual_seq_lengths_kv"], np.ndarray):
        direct["actual_seq_lengths_kv"] = direct["actual_seq_lengths_kv"].tolist()
    want_out, want_lse = pasa_npu.fused_attention(**direct)
    assert fake.calls == []
    assert torch.equal(out, want_out) and torch.equal(lse, want_lse)
    assert torch.isfinite(out).all() and out.abs().sum() > 0
    assert pasa_npu.torch_npu_routes() == {(f"torch_npu.{V1}", "pasa-npu", ""): 1}


def declined_calls():
    """(name, kwargs added to a supported BNSD call, reason category) of calls pasa-npu hands to torch_npu."""
    t = rand(4, 16, seed=11)
    return [
        ("vllm-ascend C8 KV antiquant", dict(key_antiquant_scale=t, value_antiquant_scale=t, key_antiquant_mode=0,
                                             value_antiquant_mode=0, inner_precise=1),
         "key_antiquant_scale, value_antiquant_scale"),
        ("MLA rope", dict(query_rope=rand(1, 4, 3, 8, seed=12), key_rope=rand(1, 2, 5, 8, seed=13)),
         "query_rope, key_rope"),
        ("quantised output", dict(quant_scale2=t), "quant_scale2"),
        ("pse_shift", dict(pse_shift=rand(1, 4, 3, 5, seed=14)), "pse_shift"),
        ("antiquant mode", dict(antiquant_mode=1), "antiquant_mode"),
        ("unknown argument", dict(future_option=3), "arguments"),
        ("TND with a full mask", dict(input_layout="TND", atten_mask=torch.zeros(3, 5, dtype=torch.bool),
                                      sparse_mode=1, actual_seq_lengths=[3], actual_seq_lengths_kv=[5]),
         "validation"),
    ]


def bnsd(seed=20):
    return rand(1, 4, 3, 16, seed=seed), rand(1, 2, 5, 16, seed=seed + 1), rand(1, 2, 5, 16, seed=seed + 2)


@pytest.mark.parametrize("name, extra, category", declined_calls(), ids=[c[0] for c in declined_calls()])
def test_declined_call_reaches_torch_npu_unchanged(fake, name, extra, category):
    q, k, v = bnsd()
    if extra.get("input_layout") == "TND":
        q, k, v = q[0].transpose(0, 1), k[0].transpose(0, 1), v[0].transpose(0, 1)
    kwargs = dict(num_heads=4, num_key_value_heads=2, input_layout="BNSD", scale=0.25)
    kwargs.update(extra)
    result = fake.module.npu_fused_infer_attention_score(q, k, v, **kwargs)
    assert result == ("torch_npu", V1)
    assert len(fake.calls) == 1
    called, args, got = fake.calls[0]
    assert called == V1 and len(args) == 3 and all(a is b for a, b in zip(args, (q, k, v)))
    assert got.keys() == kwargs.keys() and all(got[key] is kwargs[key] for key in kwargs)
    assert pasa_npu.torch_npu_routes() == {(f"torch_npu.{V1}", "torch_npu", category): 1}


def test_int8_query_and_v2_go_to_torch_npu(fake):
    """An int8 (quantised) query is refused by pasa-npu's validator; FIA v2 with a learnable sink goes to torch_npu
    until pasa-npu has fused_attention_v2 (and then only where its validator accepts the call)."""
    q, k, v = (torch.randint(-3, 3, t.shape, dtype=torch.int8) for t in bnsd())
    assert fake.module.npu_fused_infer_attention_score(q, k, v, num_heads=4, num_key_value_heads=2,
                                                       input_layout="BNSD") == ("torch_npu", V1)
    q, k, v = bnsd()
    result = fake.module.npu_fused_infer_attention_score_v2(
        q, k, v, num_query_heads=4, num_key_value_heads=2, input_layout="BNSD", softmax_scale=0.25,
        query_rope=rand(1, 4, 3, 8), key_rope=rand(1, 2, 5, 8))
    assert result == ("torch_npu", V2)
    assert [c[0] for c in fake.calls] == [V1, V2]


def test_out_and_workspace_calls_pasa_never_takes_reach_torch_npu(fake):
    """SGLang's MLA graph-mode decode: the workspace query and the .out call, both with rope inputs."""
    q, k, v = bnsd()
    rope = dict(query_rope=rand(1, 4, 3, 8), key_rope=rand(1, 2, 5, 8), antiquant_mode=0, antiquant_scale=None)
    kwargs = dict(num_heads=4, num_key_value_heads=2, input_layout="BNSD", scale=0.25, **rope)
    workspace = fake.module._npu_fused_infer_attention_score_get_max_workspace(q, k, v, **kwargs)
    out = [torch.empty(1, 4, 3, 16, dtype=torch.float16), torch.empty(1, dtype=torch.float16)]
    result = fake.module.npu_fused_infer_attention_score.out(q, k, v, workspace=workspace, out=out, **kwargs)
    assert result[0] is out[0] and result[1] is out[1]
    (ws_name, _, ws_kwargs), (out_name, _, out_kwargs) = fake.calls
    assert ws_name == WS1 and out_name == V1 + ".out"
    assert out_kwargs["workspace"] is workspace and out_kwargs["out"] is out
    assert all(out_kwargs[key] is kwargs[key] for key in kwargs)
    assert set(pasa_npu.torch_npu_routes()) == {(f"torch_npu.{WS1}", "torch_npu", "query_rope, key_rope"),
                                                (f"torch_npu.{V1}.out", "torch_npu", "query_rope, key_rope")}


def test_each_route_is_reported_once(fake, caplog):
    _, args, kwargs = supported_calls()[2]
    q, k, v = bnsd()
    rope = dict(query_rope=rand(1, 4, 3, 8), key_rope=rand(1, 2, 5, 8))
    with caplog.at_level(logging.WARNING, logger="pasa_npu"):
        for _ in range(3):
            fake.module.npu_fused_infer_attention_score(*args, **kwargs)
            fake.module.npu_fused_infer_attention_score(q, k, v, num_heads=4, num_key_value_heads=2,
                                                        input_layout="BNSD", **rope)
        fake.module.npu_fused_infer_attention_score(q, k, v, num_heads=4, num_key_value_heads=2,
                                                    input_layout="BNSD", pse_shift=rand(1, 4, 3, 5))
    messages = [r.getMessage() for r in caplog.records if r.name == "pasa_npu"]
    assert len(messages) == 3, messages
    assert "runs the calls pasa-npu takes on pasa_npu.fused_attention" in messages[0]
    assert "query_rope, key_rope set: MLA rope inputs" in messages[1]
    assert "pse_shift set" in messages[2]
    assert pasa_npu.torch_npu_routes() == {(f"torch_npu.{V1}", "pasa-npu", ""): 3,
                                           (f"torch_npu.{V1}", "torch_npu", "query_rope, key_rope"): 3,
                                           (f"torch_npu.{V1}", "torch_npu", "pse_shift"): 1}


def test_unpatch_restores_torch_npu_and_other_attributes_pass_through(fake):
    router = fake.module.npu_fused_infer_attention_score
    assert router is not fake.ops[V1] and router.schema_marker == f"schema of {V1}"
    assert torch.ops.npu.npu_fused_infer_attention_score_v2 is not fake.ops[V2]
    pasa_npu.patch_torch_npu()  # again: the routers are not wrapped twice
    assert fake.module.npu_fused_infer_attention_score is router
    pasa_npu.unpatch_torch_npu()
    for name, op in fake.ops.items():
        assert getattr(fake.module, name) is op and getattr(torch.ops.npu, name) is op
    assert pasa_npu.torch_npu_routes() == {}


def test_patch_needs_torch_npu(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)
    with pytest.raises(ModuleNotFoundError, match="needs torch_npu"):
        pasa_npu.patch_torch_npu()


def test_plugin_patches_only_when_asked(fake, monkeypatch):
    pasa_npu.unpatch_torch_npu()
    monkeypatch.delenv(patch.ENV, raising=False)
    patch.patch_from_environment()
    assert fake.module.npu_fused_infer_attention_score is fake.ops[V1]
    monkeypatch.setenv(patch.ENV, "yes")
    with pytest.raises(ValueError, match=patch.ENV):
        patch.patch_from_environment()
    monkeypatch.setenv(patch.ENV, "1")
    patch.patch_from_environment()
    assert isinstance(fake.module.npu_fused_infer_attention_score, patch._Router)


def test_plugin_is_declared_for_vllm_and_sglang():
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11's tomllib")
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    entry_points = pyproject["project"]["entry-points"]
    for group in ("vllm.general_plugins", "sglang.srt.plugins"):
        module, _, attr = entry_points[group]["pasa_npu"].partition(":")
        assert getattr(__import__(module, fromlist=[attr]), attr) is patch.patch_from_environment


# ============================================================================================
# what serving callers make once pasa-npu takes TND with a block table, FIA v2 and the .out forms
# ============================================================================================

def vllm_decode(n_query=(1, 3, 16), kv=(20, 35, 50)):
    """vllm-ascend's FIA call for decode / chunked prefill / speculative decoding: TND queries (up to 16 per
    request), cumulative query lengths, per-request KV lengths, caches (blocks, page, Nkv·D) behind a table."""
    k_cache, v_cache, table = paged_cache(list(kv))
    t = sum(n_query)
    return (rand(t, 4, 16, seed=30), k_cache, v_cache), dict(
        atten_mask=COMPRESSED, block_table=table, input_layout="TND", block_size=16,
        actual_seq_lengths=np.cumsum(n_query).tolist(), actual_seq_lengths_kv=list(kv), num_key_value_heads=2,
        num_heads=4, scale=0.25, sparse_mode=3)


def test_vllm_tnd_paged_call_runs_on_pasa(fake):
    args, kwargs = vllm_decode()
    out, _ = fake.module.npu_fused_infer_attention_score(*args, **kwargs)
    want, _ = pasa_npu.fused_attention(*args, **kwargs)
    assert fake.calls == [] and torch.equal(out, want)


def test_vllm_graph_mode_out_with_workspace_runs_on_pasa(fake):
    args, kwargs = vllm_decode()
    workspace = fake.module._npu_fused_infer_attention_score_get_max_workspace(*args, **kwargs)
    out = torch.empty_like(args[0])
    lse = torch.empty(1, dtype=torch.float32)
    result = fake.module.npu_fused_infer_attention_score.out(*args, workspace=workspace, out=[out, lse], **kwargs)
    want, _ = pasa_npu.fused_attention(*args, **kwargs)
    assert fake.calls == [] and result[0] is out and torch.equal(out, want)


def test_vllm_v2_sink_out_runs_on_pasa(fake):
    args, v1 = vllm_decode()
    kwargs = dict(atten_mask=v1["atten_mask"], block_table=v1["block_table"], input_layout="TND", block_size=16,
                  actual_seq_qlen=v1["actual_seq_lengths"], actual_seq_kvlen=v1["actual_seq_lengths_kv"],
                  num_key_value_heads=2, num_query_heads=4, sparse_mode=3, pre_tokens=2147483647, next_tokens=0,
                  softmax_scale=0.25, learnable_sink=rand(4, seed=40, dtype=torch.bfloat16))
    workspace = fake.module._npu_fused_infer_attention_score_v2_get_max_workspace(*args, **kwargs)
    out = torch.empty_like(args[0])
    fake.module.npu_fused_infer_attention_score_v2.out(*args, workspace=workspace,
                                                       out=[out, torch.empty(1, dtype=torch.float32)], **kwargs)
    want, _ = pasa_npu.fused_attention_v2(*args, **kwargs)
    assert fake.calls == [] and torch.equal(out, want)


def test_workspace_goes_only_to_the_implementation_that_sized_it(fake):
    """vllm-ascend shares one workspace across the layers of a graph size: a call pasa-npu declines gets None
    instead of pasa-npu's workspace."""
    args, kwargs = vllm_decode()
    workspace = fake.module._npu_fused_infer_attention_score_get_max_workspace(*args, **kwargs)
    out = [torch.empty_like(args[0]), torch.empty(1, dtype=torch.float32)]
    fake.module.npu_fused_infer_attention_score.out(*args, workspace=workspace, out=out, pse_shift=rand(1), **kwargs)
    (name, _, got), = fake.calls
    assert name == V1 + ".out" and got["workspace"] is None and got["out"] is out


def test_vllm_prefill_without_cache_passes_its_page_length_and_runs_on_pasa(fake):
    """vllm-ascend passes block_size on every call, also without a block_table (its prefill without a KV
    cache); FIA ignores it there, and so does pasa_npu.fused_attention, to which the patch passes it."""
    (name, args, kwargs), = [c for c in supported_calls() if c[0] == "TND prefill"]
    out, _ = fake.module.npu_fused_infer_attention_score(*args, block_size=128, **kwargs)
    want, _ = pasa_npu.fused_attention(*args, **kwargs)
    assert fake.calls == [] and torch.equal(out, want)
    assert torch.equal(pasa_npu.fused_attention(*args, block_size=128, **kwargs)[0], want)


def test_defaults_of_arguments_pasa_never_takes_reach_pasa_unfiltered(fake, monkeypatch):
    """The patch passes FIA's arguments at their defaults on to pasa-npu's function, which validates them (one
    place), instead of filtering them itself."""
    seen = {}
    real = pasa_npu.fused_attention

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(pasa_npu, "fused_attention", spy)
    q, k, v = bnsd()
    fake.module.npu_fused_infer_attention_score(q, k, v, num_heads=4, num_key_value_heads=2, input_layout="BNSD",
                                                antiquant_mode=0, antiquant_scale=None, block_size=128)
    assert fake.calls == [] and seen["antiquant_mode"] == 0 and seen["block_size"] == 128
    assert "antiquant_scale" in seen and seen["antiquant_scale"] is None


def test_compiled_serving_steps_run_on_pasa_from_the_first_call(fake, caplog):
    """A model compiled with fullgraph=True whose first call of the process is traced: the route is decided and
    reported (once) while Dynamo traces, outside the traced code, and the compiled steps equal eager calls and
    compile at most twice (vllm-ascend's TND call with its lengths as lists)."""
    from support import COMPRESSED_ON_DEVICE as MASK  # on the steps' device
    from support import run_steps

    def vllm_step(q, k_cache, v_cache, table, cum, kv_lens):
        return fake.module.npu_fused_infer_attention_score(
            q, k_cache, v_cache, atten_mask=MASK, block_table=table, input_layout="TND", block_size=16,
            actual_seq_lengths=cum, actual_seq_lengths_kv=kv_lens, num_key_value_heads=2, num_heads=4, scale=0.25,
            sparse_mode=3, softmax_lse_flag=True)

    with caplog.at_level(logging.WARNING, logger="pasa_npu"):
        assert run_steps([(vllm_step, "list")], 3, steps=6) == [2]
    messages = [r.getMessage() for r in caplog.records if r.name == "pasa_npu"]
    assert len(messages) == 1 and "runs the calls pasa-npu takes on pasa_npu.fused_attention" in messages[0]
    assert fake.calls == [] and set(pasa_npu.torch_npu_routes()) == {(f"torch_npu.{V1}", "pasa-npu", "")}


def test_a_compiled_call_pasa_declines_reaches_torch_npu(fake, caplog):
    q, k, v = bnsd()

    def declined(q, k, v):  # 4 query heads over 3 KV heads: refused by pasa-npu's validation
        return fake.module.npu_fused_infer_attention_score(q, k, v, num_heads=4, num_key_value_heads=3,
                                                           input_layout="BNSD")

    with caplog.at_level(logging.WARNING, logger="pasa_npu"):
        assert torch.compile(declined, fullgraph=True, backend="aot_eager")(q, k, v) == ("torch_npu", V1)
    messages = [r.getMessage() for r in caplog.records if r.name == "pasa_npu"]
    assert len(messages) == 1 and "must be a multiple of num_key_value_heads (3)" in messages[0]
    assert [name for name, _, _ in fake.calls] == [V1]


def test_a_repeated_call_is_validated_once_per_step_not_twice(fake, monkeypatch):
    """The router asks pasa-npu's validation whether it takes a call, then pasa-npu runs it: a call whose
    signature pasa-npu has validated before costs one validation a step (the call's own, or none once it is
    planned), not a second one in the router. The first call is validated by both."""
    from pasa_npu import interface

    counted = []
    real = interface.make_problem
    monkeypatch.setattr(interface, "make_problem", lambda *a, **k: counted.append(1) or real(*a, **k))
    q, k, v = bnsd()
    call = fake.module.npu_fused_infer_attention_score
    first = call(q, k, v, num_heads=4, num_key_value_heads=2, input_layout="BNSD", softmax_lse_flag=True)
    assert len(counted) == 2
    for _ in range(3):
        counted.clear()
        again = call(q, k, v, num_heads=4, num_key_value_heads=2, input_layout="BNSD", softmax_lse_flag=True)
        assert len(counted) <= 1 and torch.equal(again[0], first[0]) and torch.equal(again[1], first[1])
    counted.clear()  # another signature: validated by both again
    call(q, k, v, num_heads=4, num_key_value_heads=2, input_layout="BNSD", softmax_lse_flag=False)
    assert len(counted) == 2 and fake.calls == []

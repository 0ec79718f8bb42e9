"""FIA's options, declared once (pasa_npu.options): every public form's signature, both operators' schemas, the
docstrings' argument lists and docs/fia.md's table agree with the declaration; and FIA's own argument rules
(lengths, table rows and padding, defaults of what pasa-npu does not implement) hold."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import pasa_npu
from pasa_npu import interface, options
from pasa_npu.options import DECLARED, NOT_IMPLEMENTED, OPTIONS, V1_OPTIONS
from pasa_npu.problem import make_problem
from support import _paged

ROOT = Path(__file__).resolve().parents[2]


def _keywords(function) -> dict:
    return {name: p for name, p in inspect.signature(function).parameters.items() if p.kind is p.KEYWORD_ONLY}


def test_every_signature_is_the_declarations():
    by_name = {o.name: o for o in DECLARED}
    v1 = inspect.signature(pasa_npu.fused_attention).parameters
    assert list(v1)[:3] == ["query", "key", "value"]
    assert list(_keywords(pasa_npu.fused_attention)) == list(V1_OPTIONS)  # FIA's order
    assert list(v1.values())[-1].kind is inspect.Parameter.VAR_KEYWORD  # FIA's arguments not implemented
    v2 = _keywords(pasa_npu.fused_attention_v2)
    assert set(v2) == {o.v2 or o.name for o in DECLARED}
    for o in DECLARED:
        for form, name in ((v1, o.name), (v2, o.v2 or o.name)):
            if o.v2 is None and form is v1:
                continue
            assert (form[name].annotation, form[name].default) == (o.annotation, o.default), name
    assert interface.OPTIONS == OPTIONS == tuple(by_name)
    assert interface._DEFAULTS == options.DEFAULTS
    assert interface._V2_DEFAULTS == {name: p.default for name, p in v2.items()}
    for op, out in ((torch.ops.pasa_npu.fused_attention, False), (torch.ops.pasa_npu.fused_attention_out, True)):
        assert str(op.default._schema) == op.default._schema.name + options.op_schema(out)
    with pytest.raises(TypeError, match="make_problem.. got an unexpected keyword argument 'scale_value'"):
        make_problem(torch.zeros(1, 1, 8), torch.zeros(1, 1, 8), torch.zeros(1, 1, 8), scale_value=1.0)


def _documented(function) -> list[str]:
    text = inspect.getdoc(function)
    section = text.split("Arguments:\n", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^    \**(\w+):", section, flags=re.M)


def test_every_docstring_lists_the_declared_arguments():
    assert list(options.DOCS) == list(OPTIONS)
    assert _documented(pasa_npu.fused_attention) == ["query", "key", "value", *V1_OPTIONS, "fia_only"]
    v2_only = [o.name for o in DECLARED if o.v2 is None]
    assert _documented(pasa_npu.fused_attention_v2) == [*v2_only, "fia_v2_only"]


def test_docs_table_is_the_declarations_and_names_real_tests():
    assert options.markdown_table() in (ROOT / "docs/fia.md").read_text(), \
        "docs/fia.md's argument table differs from `python -m pasa_npu.options`"
    for test in re.findall(r"`(tests/\w+\.py)::(\w+)`", options.markdown_table()):
        assert re.search(rf"^def {test[1]}\(", (ROOT / test[0]).read_text(), flags=re.M), test


# ------------------------------------------------------------------------------------------------
# FIA's rules
# ------------------------------------------------------------------------------------------------

N, NKV, D, PAGE = 4, 2, 16, 16


def _tnd_paged(seed=0):
    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    q_lens, kv_lens = [3, 1, 2], [20, 7, 33]
    q = torch.randn(sum(q_lens), N, D, generator=g).half()
    k = torch.randn(3, NKV, max(kv_lens), D, generator=g).half()
    v = torch.randn(3, NKV, max(kv_lens), D, generator=g).half()
    kc, vc, table = _paged(k, v, kv_lens, PAGE, rng, four_d=True)
    kw = dict(num_heads=N, num_key_value_heads=NKV, input_layout="TND", actual_seq_lengths=np.cumsum(q_lens).tolist(),
              actual_seq_lengths_kv=kv_lens, block_table=table, block_size=PAGE, softmax_lse_flag=True,
              precision="fp32")
    return q, kc, vc, kw


def test_lengths_take_at_least_b_values_and_use_the_first_b():
    """vllm-ascend's DCP graph replay pads the key lengths with zeros to its token count and its table with
    rows: FIA uses the first B of each (B = the query lengths' count with TND); so does pasa-npu."""
    q, kc, vc, kw = _tnd_paged()
    want = pasa_npu.fused_attention(q, kc, vc, **kw)
    table = kw["block_table"]
    padded = dict(kw, actual_seq_lengths_kv=kw["actual_seq_lengths_kv"] + [0] * 3,
                  block_table=torch.cat([table, torch.full((3, table.shape[1]), -1, dtype=torch.int32)]))
    got = pasa_npu.fused_attention(q, kc, vc, **padded)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    with pytest.raises(ValueError, match=r"actual_seq_lengths_kv must have at least one entry per batch \(B = 3"):
        pasa_npu.fused_attention(q, kc, vc, **dict(kw, actual_seq_lengths_kv=[20, 7]))
    # dense TND: cumulative key lengths, the first B used
    k = torch.randn(40, NKV, D).half()
    dense = dict(num_heads=N, num_key_value_heads=NKV, input_layout="TND", actual_seq_lengths=[3, 4, 6],
                 precision="fp32")
    want = pasa_npu.fused_attention(q, k, k, actual_seq_lengths_kv=[10, 20, 40], **dense)[0]
    assert torch.equal(pasa_npu.fused_attention(q, k, k, actual_seq_lengths_kv=[10, 20, 40, 40, 40], **dense)[0], want)


@pytest.mark.parametrize("check_inputs", [False, True])
def test_table_ids_past_the_used_pages_are_ignored_in_both_check_modes(check_inputs):
    q, kc, vc, kw = _tnd_paged(1)
    want = pasa_npu.fused_attention(q, kc, vc, **kw)
    table = kw["block_table"].clone()
    for i, c in enumerate(kw["actual_seq_lengths_kv"]):
        table[i, -(-c // PAGE):] = -1  # FIA's padding past each batch's pages
    got = pasa_npu.fused_attention(q, kc, vc, **dict(kw, block_table=table, check_inputs=check_inputs))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    table[1, 0] = -1  # a page batch 1 uses
    with pytest.raises(ValueError, match=r"block_table(\[1\] holds a block id outside| holds block ids in \[-1)"):
        pasa_npu.fused_attention(q, kc, vc, **dict(kw, block_table=table, check_inputs=check_inputs))


def test_block_table_is_int32_as_in_fia():
    q, kc, vc, kw = _tnd_paged()
    with pytest.raises(ValueError, match=r"block_table must be a 2-D int32 tensor .*FIA's dtype, got a torch.int64"):
        pasa_npu.fused_attention(q, kc, vc, **dict(kw, block_table=kw["block_table"].long()))


def _bnsd(seed=3):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(2, N, 3, D, generator=g).half(), torch.randn(2, NKV, 9, D, generator=g).half(),
            torch.randn(2, NKV, 9, D, generator=g).half())


def test_every_fia_argument_is_accepted_at_its_default():
    """Code written for FIA passes its arguments at their defaults (antiquant_mode=0, antiquant_scale=None, ...)
    and vllm-ascend its page length without a table: every form takes them, as FIA does."""
    q, k, v = _bnsd()
    kw = dict(num_heads=N, num_key_value_heads=NKV, input_layout="BNSD", softmax_lse_flag=True)
    want = pasa_npu.fused_attention(q, k, v, **kw)
    fia = {name: default for name, (default, _) in NOT_IMPLEMENTED["v1"].items()}
    for got in (pasa_npu.fused_attention(q, k, v, block_size=128, **fia, **kw),
                pasa_npu.fused_attention_out(q, k, v, out=(torch.empty_like(want[0]), torch.empty_like(want[1])),
                                             block_size=128, **fia, **kw)):
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert pasa_npu.fused_attention_workspace(q, k, v, block_size=128, **fia, **kw).numel() == 0
    v2 = {name: default for name, (default, _) in NOT_IMPLEMENTED["v2"].items()}
    got = pasa_npu.fused_attention_v2(q, k, v, num_query_heads=N, num_key_value_heads=NKV, input_layout="BNSD",
                                      return_softmax_lse=True, block_size=128, **v2)
    assert torch.equal(got[0], want[0])


@pytest.mark.parametrize("name, value", [("antiquant_scale", "tensor"), ("antiquant_mode", 1),
                                         ("key_antiquant_mode", 1), ("query_rope", "tensor"), ("pse_shift", "tensor")])
def test_unimplemented_arguments_are_refused_by_name(name, value):
    q, k, v = _bnsd()
    value = torch.zeros(1) if value == "tensor" else value
    with pytest.raises(ValueError, match=rf"^{name} set: .*which pasa-npu does not implement") as error:
        pasa_npu.fused_attention(q, k, v, num_heads=N, num_key_value_heads=NKV, input_layout="BNSD", **{name: value})
    assert "\n" not in str(error.value)
    if name in NOT_IMPLEMENTED["v2"]:  # the v2 forms, the workspace query among them
        with pytest.raises(options.NotImplementedArgument, match=rf"^{name} set: ") as error:
            pasa_npu.fused_attention_v2_workspace(q, k, v, num_query_heads=N, num_key_value_heads=NKV,
                                                  input_layout="BNSD", **{name: value})
        assert error.value.names == (name,)
    with pytest.raises(ValueError, match=r"value's last dim 8 differs from key's 16: MLA's unequal head dims"):
        pasa_npu.fused_attention(q, k, v[..., :8], num_heads=N, num_key_value_heads=NKV, input_layout="BNSD")


def test_the_default_kv_block_is_settled_before_the_backend_runs(monkeypatch):
    """fp32_frame's block above D = 128 is the Triton kernel's 64: the problem a backend is chosen for already
    holds it (no backend sees a block it did not compute with), and the device's kernel decides it when no
    backend is named."""
    g = torch.Generator().manual_seed(5)
    q, k = torch.randn(1, 2, 3, 192, generator=g).half(), torch.randn(1, 2, 5, 192, generator=g).half()
    kw = dict(num_heads=2, input_layout="BNSD", precision="fp32_frame")
    assert make_problem(q, k, k, backend="triton", **kw).block_kv == 64
    assert make_problem(q, k, k, **kw).block_kv == 128  # CPU tensors: the reference backend's
    assert make_problem(q, k, k, backend="triton", block_kv=32, **kw).block_kv == 32
    seen = []

    def select(problem, name=None):
        seen.append((problem.block_kv, name))
        raise RuntimeError("stop")

    monkeypatch.setattr(interface.backends, "select", select)
    with pytest.raises(RuntimeError, match="stop"):
        pasa_npu.fused_attention(q, k, k, backend="triton", **kw)
    assert seen == [(64, "triton")]

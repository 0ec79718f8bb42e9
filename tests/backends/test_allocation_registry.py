"""Every allocation of python/pasa_npu/precision.py has its piece in each implementation: its golden definition
(the variant pasa_npu.blockwise runs and its row in docs/golden.md), its Triton stage (the kernel's FAMILY, or a
place in triton.NOT_COMPUTED) and, where it has a ``kernel_key``, its AscendC policy (a row of
op_kernel/pasa_allocation.h's PASA_KERNEL_ALLOCATIONS, whose rows the entry's TILING_KEY_IS tests are generated
from). Each test names the allocation and the piece it lacks. Read as text and source: no build, no kernel run.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import numpy as np

from pasa_npu import blockwise, golden
from pasa_npu.backends import triton as triton_backend
from pasa_npu.precision import ALLOCATIONS, Allocation

ROOT = Path(__file__).resolve().parents[2]
TYPE = {"FP16": "float16", "FP32": "float32"}
# The fields that pick a variant of the loop (overflow_free is a claim about the variant, not a choice of one).
VARIANT_FLAGS = tuple(f.name for f in dataclasses.fields(Allocation) if f.type == "bool" and f.name != "overflow_free")


def test_each_variant_flag_is_read_by_the_golden_model_and_the_triton_backend():
    """A flag the golden loop or the Triton family ignores would run its allocation as another variant."""
    golden_src = inspect.getsource(blockwise.attention)
    triton_src = inspect.getsource(triton_backend._family)
    missing = [f"{flag}: not read by {where}" for flag in VARIANT_FLAGS
               for where, src in (("blockwise.attention", golden_src), ("backends/triton.py _family", triton_src))
               if f"alloc.{flag}" not in src]
    assert not missing, missing
    several = [a.name for a in ALLOCATIONS.values() if sum(getattr(a, f) for f in VARIANT_FLAGS) > 1]
    assert not several, f"allocations with more than one of {VARIANT_FLAGS}: {several}"


def test_each_allocation_has_its_golden_definition():
    """docs/golden.md's table of allocations states each one's types as precision.py does, and the golden model
    runs it: a finite result near the float64 reference on a small unbiased case of two KV blocks."""
    text = (ROOT / "docs/golden.md").read_text().split("## The allocations", 1)[1].split("\n## ", 1)[0]
    rows = {m[0]: m[1:] for m in re.findall(r"^\| `(\w+)` \| (FP\d+)[^|]*\| (FP\d+)[^|]*\| (FP\d+)", text, re.M)}
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, s, 16)).astype(np.float16) for s in (4, 160, 160))
    want, _ = golden.reference(q, k, v, scale=0.25)
    problems = []
    for name, a in ALLOCATIONS.items():
        if name not in rows:
            problems.append(f"{name}: no row in docs/golden.md's table of allocations")
        elif tuple(TYPE[t] for t in rows[name]) != (a.score, a.state, a.output):
            problems.append(f"{name}: docs/golden.md says {rows[name]}, precision.py {(a.score, a.state, a.output)}")
        out, lse = golden.attention(q, k, v, precision=name, scale=0.25)
        if not (np.isfinite(lse).all() and np.abs(out.astype(np.float64) - want).max() < 2e-2):
            problems.append(f"{name}: the golden model's result is not the attention of the case")
    assert not problems, problems


def test_each_allocation_has_a_triton_stage_or_is_stated_not_computed():
    """An allocation the Triton backend computes runs a FAMILY the kernel branches on, with that family's score
    type and one type for the state and O (STATE16); the others are named in triton.NOT_COMPUTED."""
    kernels = (ROOT / "python/pasa_npu/backends/triton_kernels.py").read_text()
    families = set(re.findall(r'FAMILY == "(\w+)"', kernels)) | {"fa"}  # "fa": the branch no FAMILY test names
    score = {"fa": "float32", "frame": "float32", "pasa": "float16", "pasa_rs": "float16"}
    assert families == set(score), f"the kernel's families {families}: state their score type here"
    problems = [f"{n}: in triton.NOT_COMPUTED but not an allocation" for n in triton_backend.NOT_COMPUTED
                if n not in ALLOCATIONS]
    for name, a in ALLOCATIONS.items():
        if not triton_backend.computes(a):
            continue
        family = triton_backend._family(a)
        if family not in families:
            problems.append(f"{name}: Triton FAMILY {family!r} has no stage in triton_kernels.py")
        elif a.score != score[family] or a.output != a.state:
            problems.append(f"{name}: Triton FAMILY {family!r} computes S in {score[family]} and O in the state's "
                            f"type, the allocation asks {(a.score, a.state, a.output)}; add it to NOT_COMPUTED "
                            f"or give it a stage")
    assert not problems, problems


def test_each_kernel_key_has_its_policy_row_and_the_dispatch_is_generated():
    """PASA_KERNEL_ALLOCATIONS holds one row per allocation with a kernel_key, its policy named as the allocation
    and with its state's bytes; the entry's TILING_KEY_IS tests expand from that list, none written by hand."""
    header = (ROOT / "op_kernel/pasa_allocation.h").read_text()
    table = header.split("#define PASA_KERNEL_ALLOCATIONS(X)", 1)[1].split("\n\n", 1)[0]
    rows = {int(key): policy for key, policy in re.findall(r"X\((\d+),\s*(\w+)\)", table)}
    policies = {m[0]: (m[1], int(m[2])) for m in re.findall(
        r'struct (\w+) : \w+ \{\s*static constexpr const char\* NAME = "(\w+)";\s*'
        r"static constexpr uint32_t STATE_BYTES = (\d+);", header)}
    keyed = {a.kernel_key: a for a in ALLOCATIONS.values() if a.kernel_key is not None}
    problems = [f"PASA_KERNEL_ALLOCATIONS row X({k}, {rows[k]}): no allocation has kernel_key={k}"
                for k in rows if k not in keyed]
    for key, a in keyed.items():
        want = (a.name, {"float16": 2, "float32": 4}[a.state])
        if key not in rows:
            problems.append(f"{a.name}: kernel_key={key} has no row in PASA_KERNEL_ALLOCATIONS")
        elif policies.get(rows[key]) != want:
            problems.append(f"{a.name}: the policy {rows[key]} of key {key} is {policies.get(rows[key])}, not "
                            f"(NAME, STATE_BYTES) = {want}")
    assert not problems, problems
    entry = (ROOT / "op_kernel/pasa_fused_attention.cpp").read_text()
    assert "PASA_KERNEL_ALLOCATIONS(PASA_RUN_IF_KEY)" in entry
    assert not re.findall(r"TILING_KEY_IS\(\d", entry), "a hand-written TILING_KEY_IS beside the X-macro"

"""The host model refuses at compile time the calls the real AscendC API refuses on Atlas A2
(host_model/include/host_model/a2_types.h), for every API the kernel uses.

A2 below is the specification: the element types each API takes on Atlas A2 (dav_c220) and the Cast conversions
that exist, as asc-devkit states them (the commit docs/npu.md names): the SupportType lists of
impl/basic_api/dav_c220/kernel_operator_vec_*_impl.h, the instruction types of
impl/c_api/instr_impl/npu_arch_2201/vector_compute_impl/asc_repeat_reduce_*_impl.h (WholeReduce*), the
SupportType list of impl/basic_api/kernel_operator_vec_reduce_intf_impl.h (BlockReduceMax), the
CastIntrinsicsImpl overloads of kernel_operator_vec_vconv_impl.h.

* Always (CI, no CANN): one call per API and element type of TYPES (per Cast pair), compiled against the host
  model in two batches: the calls A2 accepts must compile, and each call it refuses must fail at its own line.
* With ASC_DEVKIT_DIR (an asc-devkit checkout): A2 itself is checked against the headers: the same lists read
  from them, the accepted batch compiled against them (scripts/check_ascendc_headers.sh's flags and
  stand-ins), and the refused calls whose refusal the headers make at compile time reported at their lines.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TYPES = ("half", "float", "int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t", "int64_t")

ARITHMETIC = {"half", "float", "int16_t", "int32_t"}
FLOATING = {"half", "float"}
FILL = {"half", "int16_t", "uint16_t", "int32_t", "uint32_t", "float"}  # and bfloat16_t, not modelled
A2 = {
    **{api: ARITHMETIC for api in ("Add", "Sub", "Mul", "Max", "Min", "Adds", "Muls", "Maxs", "Mins")},
    **{api: FLOATING for api in ("Div", "Exp", "Ln", "Abs", "Sqrt", "Reciprocal", "WholeReduceSum",
                                 "WholeReduceMax", "BlockReduceMax")},
    "Relu": {"half", "float", "int32_t"},
    "Duplicate": FILL,
    "Brcb": FILL,
    "Compare": {"half", "float", "int32_t"},  # int32_t with CMPMODE::EQ only (checked when the call runs)
    "Compare.dst": {"int8_t", "uint8_t"},
    "CompareScalar": {"half", "float", "int32_t"},
    "CompareScalar.dst": {"uint8_t"},
    "Select": {"half", "float"},
    "Select.mask": {"uint8_t", "uint16_t", "uint32_t", "uint64_t"},
}
# Cast (dst, src) pairs with an overload on Atlas A2, within TYPES (bfloat16_t and int4b_t pairs left out).
A2_CAST = {
    ("half", "int32_t"), ("half", "int8_t"), ("half", "uint8_t"), ("half", "int16_t"), ("half", "float"),
    ("float", "half"), ("float", "int16_t"), ("float", "int32_t"), ("float", "int64_t"), ("float", "float"),
    ("int8_t", "half"), ("uint8_t", "half"), ("int16_t", "half"), ("int16_t", "float"), ("int16_t", "int32_t"),
    ("int32_t", "half"), ("int32_t", "float"), ("int32_t", "int64_t"), ("int64_t", "float"), ("int64_t", "int32_t"),
    ("int8_t", "int16_t"), ("uint8_t", "int16_t"),
}

# The round modes of each pair (the overload's switch; int32_t -> half is a dequantisation that ignores the mode
# and int16_t -> int8_t/uint8_t report "not supported": no mode), and the pairs of the count form's
# CheckCastDatatype (all but those two).
ROUNDING = {"CAST_RINT", "CAST_FLOOR", "CAST_CEIL", "CAST_ROUND", "CAST_TRUNC"}
A2_CAST_MODES = {
    **{pair: ROUNDING for pair in A2_CAST},
    **{pair: {"CAST_NONE"} for pair in (("half", "int8_t"), ("half", "uint8_t"), ("float", "half"),
                                        ("float", "int16_t"), ("int16_t", "int32_t"), ("int32_t", "int64_t"),
                                        ("int64_t", "int32_t"))},
    **{pair: ROUNDING | {"CAST_NONE"} for pair in (("half", "int16_t"), ("float", "int32_t"), ("int8_t", "half"),
                                                   ("uint8_t", "half"))},
    ("half", "float"): ROUNDING | {"CAST_NONE", "CAST_ODD"},
    **{pair: set() for pair in (("half", "int32_t"), ("int8_t", "int16_t"), ("uint8_t", "int16_t"))},
}
A2_CAST_COUNT_FORM = A2_CAST - {("int8_t", "int16_t"), ("uint8_t", "int16_t")}

BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min")
UNARY = ("Exp", "Ln", "Abs", "Sqrt", "Reciprocal", "Relu")
SCALAR = ("Adds", "Muls", "Maxs", "Mins")


def probes() -> list[tuple[str, str, bool, bool]]:
    """(what, call, accepted on A2, refused at compile time by the real headers themselves)."""
    out = []
    for t in TYPES:
        ok = lambda api: t in A2[api]  # noqa: E731
        for api in BINARY:
            out.append((f"{api}<{t}>", f"{api}(v<{t}>(), v<{t}>(), v<{t}>(), 64);", ok(api), False))
            out.append((f"{api}<{t}> mask", f"{api}(v<{t}>(), v<{t}>(), v<{t}>(), uint64_t(64), uint8_t(1), "
                        "BinaryRepeatParams());", ok(api), True))
        for api in UNARY:
            out.append((f"{api}<{t}>", f"{api}(v<{t}>(), v<{t}>(), 64);", ok(api), False))
            out.append((f"{api}<{t}> mask", f"{api}(v<{t}>(), v<{t}>(), uint64_t(64), uint8_t(1), "
                        "UnaryRepeatParams());", ok(api), True))
        for api in SCALAR:
            out.append((f"{api}<{t}>", f"{api}(v<{t}>(), v<{t}>(), {t}(1), 64);", ok(api), True))
        out += [
            (f"Duplicate<{t}>", f"Duplicate(v<{t}>(), {t}(1), 64);", ok("Duplicate"), False),
            (f"Brcb<{t}>", f"Brcb(v<{t}>(), v<{t}>(), uint8_t(1), BrcbRepeatParams(1, 8));", ok("Brcb"), False),
            (f"WholeReduceSum<{t}>", f"WholeReduceSum<{t}>(v<{t}>(), v<{t}>(), 64, 1, 1, 1, 8);",
             ok("WholeReduceSum"), False),
            (f"WholeReduceMax<{t}>", f"WholeReduceMax<{t}>(v<{t}>(), v<{t}>(), 64, 1, 1, 1, 8, "
             "ReduceOrder::ORDER_ONLY_VALUE);", ok("WholeReduceMax"), False),
            (f"BlockReduceMax<{t}>", f"BlockReduceMax<{t}>(v<{t}>(), v<{t}>(), 1, 64, 1, 1, 8);",
             ok("BlockReduceMax"), False),
            (f"Compare<{t}>", f"Compare(v<uint8_t>(), v<{t}>(), v<{t}>(), CMPMODE::EQ, 64);", ok("Compare"), False),
            (f"Compare dst {t}", f"Compare(v<{t}>(), v<float>(), v<float>(), CMPMODE::LT, 64);",
             t in A2["Compare.dst"], False),
            (f"CompareScalar<{t}>", f"CompareScalar(v<uint8_t>(), v<{t}>(), {t}(0), CMPMODE::EQ, 64);",
             ok("CompareScalar"), False),
            (f"CompareScalar dst {t}", f"CompareScalar(v<{t}>(), v<float>(), float(0), CMPMODE::LT, 64);",
             t in A2["CompareScalar.dst"], False),
            (f"Select<{t}>", f"Select(v<{t}>(), v<uint8_t>(), v<{t}>(), v<{t}>(), "
             "SELMODE::VSEL_TENSOR_TENSOR_MODE, 64);", ok("Select"), False),
        ]
    for m in TYPES + ("uint64_t",):
        out.append((f"Select mask {m}", f"Select(v<float>(), v<{m}>(), v<float>(), v<float>(), "
                    "SELMODE::VSEL_TENSOR_TENSOR_MODE, 64);", m in A2["Select.mask"], False))
    for dst, src in itertools.product(TYPES, TYPES):
        out.append((f"Cast {src}->{dst}", f"Cast(v<{dst}>(), v<{src}>(), RoundMode::CAST_NONE, 64);",
                    (dst, src) in A2_CAST, True))
    return out


def source(calls: list[str]) -> tuple[str, list[int]]:
    """A translation unit with one function per call; the line of each call."""
    lines = ['#include "kernel_operator.h"', "using namespace AscendC;",
             "template <typename T> const LocalTensor<T>& v();"]
    at = []
    for i, call in enumerate(calls):
        lines.append(f"void probe{i}() {{")
        at.append(len(lines) + 1)
        lines += [f"    {call}", "}"]
    return "\n".join(lines) + "\n", at


def compile_batches(tmp: Path, flags: list[str], tag: str) -> dict:
    """Compile the accepted and the refused probes; {'accepted': result, 'refused': (result, lines, probes)}."""
    all_probes = probes()
    accepted = [p for p in all_probes if p[2]]
    refused = [p for p in all_probes if not p[2]]
    jobs = {}
    for name, batch in (("accepted", accepted), ("refused", refused)):
        text, at = source([p[1] for p in batch])
        path = tmp / f"{tag}_{name}.cpp"
        path.write_text(text)
        jobs[name] = (path, at, batch)

    def run(path):
        return subprocess.run(["g++", "-fsyntax-only", *flags, str(path)], capture_output=True, text=True,
                              timeout=900)

    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(jobs, pool.map(run, [j[0] for j in jobs.values()])))
    return {name: (results[name], jobs[name][1], jobs[name][2], jobs[name][0]) for name in jobs}


def reported_at(result: subprocess.CompletedProcess, path: Path, line: int) -> bool:
    return re.search(rf"{re.escape(path.name)}:{line}:\d+", result.stderr) is not None


def test_probes_cover_every_api_both_ways():
    all_probes = probes()
    apis = {p[0].split("<")[0].split(" ")[0] for p in all_probes}
    assert apis == set(BINARY + UNARY + SCALAR) | {"Duplicate", "Brcb", "WholeReduceSum", "WholeReduceMax",
                                                   "BlockReduceMax", "Compare", "CompareScalar", "Select", "Cast"}
    for api in apis:
        kinds = {p[2] for p in all_probes if p[0].startswith(api)}
        assert kinds == {True, False}, api


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is needed to compile the probes")
def test_host_model_accepts_what_a2_accepts_and_refuses_the_rest(tmp_path):
    flags = ["-std=c++17", "-x", "c++", "-DASCENDC_MODEL_CORE_TYPE=2", f"-I{ROOT / 'host_model' / 'include'}"]
    out = compile_batches(tmp_path, flags, "model")
    result, _, _, _ = out["accepted"]
    assert result.returncode == 0, result.stderr[-4000:]
    result, at, batch, path = out["refused"]
    assert result.returncode != 0
    missed = [p[0] for p, line in zip(batch, at) if not reported_at(result, path, line)]
    assert not missed, f"the host model accepts calls Atlas A2 refuses: {missed}"
    assert "Atlas A2" in result.stderr  # the refusals name the rule, not an unrelated error


def model_cast_table() -> dict[tuple[str, str], tuple[set[str], bool]]:
    """The Cast table of host_model/include/host_model/a2_types.h: (dst, src) -> (round modes, count form)."""
    names = {"kRounding": ROUNDING, "kNone": {"CAST_NONE"}, "kRoundingOrNone": ROUNDING | {"CAST_NONE"}, "0": set()}
    text = (ROOT / "host_model" / "include" / "host_model" / "a2_types.h").read_text()
    table = {}
    for dst, src, modes, count in re.findall(r"^ASCENDC_A2_CAST\((\w+), (\w+), (.+), (true|false)\)$", text, re.M):
        got = set()
        for term in modes.split("|"):
            term = term.strip()
            extra = re.fullmatch(r"Modes\(\{(.*)\}\)", term)
            got |= {m.strip().removeprefix("R::") for m in extra.group(1).split(",")} if extra else names[term]
        table[(dst, src)] = (got, count == "true")
    return table


def test_model_cast_modes_are_a2s():
    # The run-time half of Cast's rules (a mode the pair lacks fails when the Cast runs: the misuse case
    # misuse_cast_round_mode_the_pair_lacks of tests/npu/test_host_model.py) reads this table.
    table = model_cast_table()
    assert set(table) == A2_CAST
    assert {pair: modes for pair, (modes, _) in table.items()} == A2_CAST_MODES
    assert {pair for pair, (_, count) in table.items() if count} == A2_CAST_COUNT_FORM


# ---- against the real headers ---------------------------------------------------------------------------------
ASC = os.environ.get("ASC_DEVKIT_DIR")
needs_asc = pytest.mark.skipif(
    not ASC, reason="ASC_DEVKIT_DIR is not set: these compare A2 with an asc-devkit checkout "
                    "(github.com/mirror-cann/asc-devkit), which CI cannot fetch")


def _joined(path: Path) -> str:
    """The file with adjacent string literals joined ("a" "b" -> "ab")."""
    return re.sub(r'"\s*"', "", path.read_text())


def _types(listed: str) -> set[str]:
    return {t.strip() for t in listed.split(",")} & set(TYPES + ("uint64_t",))


def header_lists(asc: Path) -> dict[str, set[str]]:
    """Each API's type list as the dav_c220 headers state it, within TYPES."""
    impl = asc / "impl" / "basic_api" / "dav_c220"
    found: dict[str, set[str]] = {}
    for name in ("binary", "binary_scalar", "unary", "duplicate", "brcb"):
        text = _joined(impl / f"kernel_operator_vec_{name}_impl.h")
        for listed, api in re.findall(r"SupportType<\s*T,([^>]*)>\(\)\)?,\s*(?:KERNEL_LOG_INTERNAL\(\s*KERNEL_ERROR,"
                                      r"\s*)?\"Failed to check\s*dtype in (\w+)", text):
            found.setdefault(api, _types(listed))
    text = _joined(impl / "kernel_operator_vec_cmp_impl.h")
    for api, key in (("Compare", "Compare"), ("CompareScalar", "Compares / CompareScalar")):
        k = re.escape(key)
        found[f"{api}.dst"] = _types(re.search(rf"SupportType<U,([^>]*)>\(\)\),\s*KERNEL_LOG_INTERNAL\(\s*KERNEL_ERROR,"
                                               rf"\s*\"Failed to check dtype U in {k}", text).group(1))
        lists = re.findall(rf"SupportType<T,([^>]*)>\(\)\),\s*KERNEL_LOG_INTERNAL\(\s*KERNEL_ERROR,\s*\"Failed to\s*"
                           rf"check dtype T in {k} when", text)
        found[api] = set().union(*(_types(x) for x in lists))
    text = _joined(impl / "kernel_operator_vec_cmpsel_impl.h")
    t_list, u_list = re.search(r"SupportType<T,([^>]*)>\(\) && SupportType<U,([^>]*)>\(\)", text).groups()
    found["Select"], found["Select.mask"] = _types(t_list), _types(u_list)
    c_api = asc / "impl" / "c_api" / "instr_impl" / "npu_arch_2201" / "vector_compute_impl"
    for api, file in (("WholeReduceSum", "sum"), ("WholeReduceMax", "max")):
        text = (c_api / f"asc_repeat_reduce_{file}_impl.h").read_text()
        found[api] = set(re.findall(r"__ubuf__ (\w+)\* dst, __ubuf__ \w+\* src", text)) & set(TYPES)
    # BlockReduceMax's own assert up to 9.0, the shared CheckReduceBaseParams it calls from 9.1
    text = _joined(asc / "impl" / "basic_api" / "kernel_operator_vec_reduce_intf_impl.h")
    listed = re.search(r"SupportType<PrimType,([^>]*)>\(\)\),\s*\{\s*KERNEL_LOG\(KERNEL_ERROR,\s*\"Failed to check "
                       r"dtype in BlockReduceMax,", text) or re.search(
                           r"void CheckReduceBaseParams\(.*?SupportType<PrimType,([^>]*)>", text, re.S)
    found["BlockReduceMax"] = _types(listed.group(1))
    return found


def header_cast_pairs(asc: Path) -> set[tuple[str, str]]:
    text = (asc / "impl" / "basic_api" / "dav_c220" / "kernel_operator_vec_vconv_impl.h").read_text()
    pairs = re.findall(r"void CastIntrinsicsImpl\(\s*__ubuf__ (\w+)\* dst, __ubuf__ (\w+)\* src, const RoundMode&",
                       text)
    return {p for p in pairs if set(p) <= set(TYPES)}


def header_cast_modes(asc: Path) -> dict[tuple[str, str], set[str]]:
    """The round modes each CastIntrinsicsImpl overload's switch converts with (a case that calls an instruction,
    not one that asserts), within TYPES."""
    text = (asc / "impl" / "basic_api" / "dav_c220" / "kernel_operator_vec_vconv_impl.h").read_text()
    modes = {}
    for m in re.finditer(r"void CastIntrinsicsImpl\(\s*__ubuf__ (\w+)\* dst, __ubuf__ (\w+)\* src, const RoundMode&"
                         r"[^{]*\{", text):
        depth, i = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        body = text[m.end():i]
        if set(m.groups()) <= set(TYPES):
            modes[m.groups()] = {case for case, first in re.findall(r"case RoundMode::(\w+):\s*(\w+)", body)
                                 if first.startswith("vconv")}
    return modes


def header_cast_count_form(asc: Path) -> set[tuple[str, str]]:
    text = (asc / "impl" / "basic_api" / "dav_c220" / "kernel_operator_vec_vconv_impl.h").read_text()
    listed = re.search(r"CheckCastDatatype\(\)\s*\{\s*ASCENDC_DEBUG_ASSERT\(\s*\(SupportType<\s*Tuple<T, U>,"
                       r"(.*?)>\(\)\)", text, re.S).group(1)
    return {p for p in re.findall(r"Tuple<(\w+), (\w+)>", listed) if set(p) <= set(TYPES)}


@needs_asc
def test_a2_is_what_the_headers_state():
    asc = Path(ASC)
    stated = header_lists(asc)
    assert {api: stated.get(api) for api in A2} == A2
    assert header_cast_pairs(asc) == A2_CAST
    assert header_cast_modes(asc) == A2_CAST_MODES
    assert header_cast_count_form(asc) == A2_CAST_COUNT_FORM


@needs_asc
@pytest.mark.slow
def test_real_headers_accept_the_accepted_and_refuse_at_our_lines(tmp_path):
    flags = subprocess.run(
        ["bash", "-c", 'source "$0/scripts/ascendc_check/flags.sh"; '
         'python3 "$1/impl/adv_api/cmake/scripts/gen_kernel_tiling_data_def.py" "$1/include/adv_api" '
         '"$2/generated/kernel_tiling/kernel_tiling.h" >/dev/null && '
         'printf "%s\\n" "${ASC_KERNEL_FLAGS[@]}" "${ASC_AIV_FLAGS[@]}" && '
         'asc_kernel_includes "$1" "$0/scripts/ascendc_check/tikicpulib" "$2/generated"',
         str(ROOT), str(Path(ASC).resolve()), str(tmp_path)],
        capture_output=True, text=True, check=True).stdout.split("\n")
    out = compile_batches(tmp_path, [f for f in flags if f], "real")
    result, _, _, _ = out["accepted"]
    assert result.returncode == 0, result.stderr[-4000:]
    result, at, batch, path = out["refused"]
    missed = [p[0] for p, line in zip(batch, at) if p[3] and not reported_at(result, path, line)]
    assert not missed, f"the real headers accept at compile time calls A2 says they refuse: {missed}"

"""Rules of the real toolchain that only CANN's compiler would enforce on op_host/ (never compiled here)
and that the host model cannot see: the sources must use the current API names (asc-devkit
docs/zh/api/附录/接口变更说明.md), outside the one header that chooses by CANN version, set the batch schedule mode
for the kernel's all-core barriers, and take intra-core event IDs from the TPipe's pool."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMPAT = ROOT / "op_host" / "pasa_cann_compat.h"
SOURCES = sorted(p for p in [*ROOT.glob("op_host/*.cpp"), *ROOT.glob("op_host/*.h"), *ROOT.glob("op_kernel/*")]
                 if p != COMPAT)

# deprecated name -> its replacement
RENAMED = {
    "CalcTschBlockDim": "CalcTschNumBlocks",
    "SetBlockDim": "SetSimdNumBlocks",
    "GetTaskRation": "GetTaskRatio",
}


def test_sources_use_the_current_api_names():
    assert SOURCES
    for path in SOURCES:
        text = path.read_text()
        for old, new in RENAMED.items():
            assert not re.search(rf"\b{old}\b", text), f"{path.relative_to(ROOT)} uses {old}; use {new}"


def test_only_cann_8_takes_the_old_names():
    # pasa_cann_compat.h: the current names for PASA_CANN_VERSION >= 900, the old ones in its #else (CANN 8.x)
    text = COMPAT.read_text()
    new_branch, old_branch = text.split("#if PASA_CANN_VERSION >= 900", 1)[1].split("#else", 1)
    old_branch = old_branch.split("#endif", 1)[0]
    for old, new in RENAMED.items():
        if re.search(rf"\b{old}\b", text):
            assert re.search(rf"\b{new}\b", new_branch) and not re.search(rf"\b{old}\b", new_branch), old
            assert re.search(rf"\b{old}\b", old_branch), old


def test_kernel_takes_event_ids_from_the_pool():
    # With TPipe and TQue an ID is AllocEventID's or FetchEventID's, never a literal one, which can be an ID a queue
    # holds set (SetFlag/WaitFlag (ISASI) docs, 约束说明); the host model catches the collisions a run reaches.
    literal = re.compile(r"\b(?:Set|Wait)Flag<HardEvent::\w+>\(\s*(?:EVENT_ID\d|\d+)\s*\)|\bEVENT_ID\d\b")
    for path in sorted(ROOT.glob("op_kernel/*")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            assert not literal.search(line), f"{path.relative_to(ROOT)}:{n}: a literal event ID: {line.strip()}"


def test_op_tiling_sets_the_batch_schedule_mode():
    text = (ROOT / "op_host" / "pasa_fused_attention_def.cpp").read_text()
    assert "SetScheduleMode(r.scheduleMode)" in text
    assert "r.scheduleMode = kScheduleModeBatch" in (ROOT / "op_host" / "pasa_tiling.cpp").read_text()


def test_kernel_flag_ids_avoid_syncalls():
    text = (ROOT / "op_kernel" / "pasa_common.h").read_text()
    ids = [int(v) for v in re.findall(r"constexpr uint16_t FLAG_\w+ = (\d+);", text)]
    assert ids and all(0 <= i <= 10 or i == 15 for i in ids), ids

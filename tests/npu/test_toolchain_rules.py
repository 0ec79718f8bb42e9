"""Rules of the real toolchain that only CANN's compiler would enforce on op_host/ (never compiled here)
and that the host model cannot see: the sources must use the current API names (asc-devkit
docs/zh/api/附录/接口变更说明.md) and set the batch schedule mode for the kernel's all-core barriers."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*ROOT.glob("op_host/*.cpp"), *ROOT.glob("op_host/*.h"), *ROOT.glob("op_kernel/*")])

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


def test_op_tiling_sets_the_batch_schedule_mode():
    text = (ROOT / "op_host" / "pasa_fused_attention_def.cpp").read_text()
    assert "SetScheduleMode(r.scheduleMode)" in text
    assert "r.scheduleMode = kScheduleModeBatch" in (ROOT / "op_host" / "pasa_tiling.cpp").read_text()


def test_kernel_flag_ids_avoid_syncalls():
    text = (ROOT / "op_kernel" / "pasa_common.h").read_text()
    ids = [int(v) for v in re.findall(r"constexpr uint16_t FLAG_\w+ = (\d+);", text)]
    assert ids and all(0 <= i <= 10 or i == 15 for i in ids), ids

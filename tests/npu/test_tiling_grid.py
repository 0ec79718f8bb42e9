"""The host tiling's grid tests (op_host/tests/test_tiling.cpp), built by CMake and run section by section.

Each section prints ``<section>: <n> checks, <f> failed``; a pass needs exit code 0, no failure and at
least the number of checks the section's grid implies, so a grid that silently shrank fails too.
"""

from __future__ import annotations

import re

import pytest

import cmake_tree

# Slow on first use: it compiles the host tiling and its test; `-m "not slow"` leaves it out.
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(cmake_tree.tools_missing() is not None,
                                 reason=f"C++ tests need CMake and g++: {cmake_tree.tools_missing()}")]

# section -> minimum number of checks (about 90% of what the grids in test_tiling.cpp perform today)
SECTIONS = {
    "grid": 23_000_000,     # D {64,80,96,128,256} x 7 S1 x 6 S2 (to 128k) x GQA 1-16 x 3 allocations
    "decode": 50_000,       # S1 = 1, split-KV coverage and the combine step
    "platforms": 200_000,   # fewer cores / smaller memories
    "layouts": 10_000,      # BNSD/BSH/BSND x sparse modes 0-4 x lengths
    "beta": 300,
    "errors": 30,           # bad inputs raise std::invalid_argument naming the argument
    "head_dims": 15_000,    # D 16..256 step 16 x 3 allocations: every plan within the usable 184 KB UB
}


@pytest.fixture(scope="module")
def test_tiling_exe():
    return cmake_tree.build("test_tiling") / "test_tiling"


@pytest.mark.parametrize("section", list(SECTIONS))
def test_tiling_section(test_tiling_exe, section):
    res = cmake_tree.run([str(test_tiling_exe), section])
    m = re.search(rf"^{section}: (\d+) checks, (\d+) failed$", res.stdout, flags=re.M)
    assert res.returncode == 0 and m is not None and m.group(2) == "0", res.stdout[-6000:]
    assert int(m.group(1)) >= SECTIONS[section], res.stdout[-2000:]


def test_unknown_section_is_an_error(test_tiling_exe):
    res = cmake_tree.run([str(test_tiling_exe), "no_such_section"])
    assert res.returncode == 2 and "unknown section" in res.stdout

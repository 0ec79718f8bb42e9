"""The top-level CMakeLists.txt: its libraries and ctest executables built in the CMake tree all C++
tests share (tests/cmake_tree.py), then every C++ test registered with ctest runs and must pass.

Also the configure-time decisions that need no compiler run: the CANN parts are refused or planned
according to ASCEND_CANN_PACKAGE_PATH. Nothing here compiles CANN code (no CANN exists in CI).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile

import pytest

import cmake_tree

# Slow on first use: it compiles the kernel and the host model (a minute or more on 2 cores, unless a
# pip install built them in the same tree); `-m "not slow"` leaves it out.
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(cmake_tree.tools_missing() is not None,
                                 reason=f"C++ tests need CMake and g++: {cmake_tree.tools_missing()}")]


@pytest.fixture(scope="session")
def tree():
    # Not the target "all": in a tree pip configured that would also relink the Python module that
    # this test process may have loaded.
    return cmake_tree.build("pasa_tiling", "pasa_kernel_model", *cmake_tree.CTEST_TARGETS)


def test_always_built_libraries_exist(tree):
    for lib in ("libpasa_tiling.a", "libpasa_kernel_model.a"):
        assert (tree / lib).is_file(), f"{lib} not built in {tree}"


def test_ctest_registers_the_tiling_and_host_model_tests(tree):
    res = cmake_tree.run([cmake_tree.CTEST, "-N"], cwd=tree)
    names = re.findall(r"Test\s+#\d+: (\S+)", res.stdout)
    assert res.returncode == 0 and "tiling_grid" in names, res.stdout
    assert len(names) >= 2, f"only {names}: the host model's misuse tests are not registered"


def test_every_ctest_test_passes(tree):
    jobs = str(os.cpu_count() or 1)
    res = cmake_tree.run([cmake_tree.CTEST, "--output-on-failure", "--timeout", "300", "-j", jobs], cwd=tree)
    assert res.returncode == 0, res.stdout[-8000:]
    # ctest 3: "100% tests passed, 0 tests failed out of 2"; ctest 4: "100% tests passed out of 2"
    assert re.search(r"100% tests passed(, 0 tests failed)? out of [1-9]", res.stdout), res.stdout[-3000:]


def _configure(*args: str, env_drop=("ASCEND_HOME_PATH", "ASCEND_CANN_PACKAGE_PATH")):
    env = {k: v for k, v in os.environ.items() if k not in env_drop}
    with tempfile.TemporaryDirectory(prefix="pasa_cfg_") as tmp:
        return subprocess.run([cmake_tree.CMAKE, "-S", str(cmake_tree.ROOT), "-B", tmp, "-DPASA_BUILD_PYTHON=OFF",
                               "-DPASA_BUILD_TESTS=OFF", *args],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)


def test_npu_extension_without_cann_is_refused_with_the_reason():
    res = _configure("-DPASA_BUILD_NPU_EXT=ON")
    assert res.returncode != 0
    assert "PASA_BUILD_NPU_EXT=ON needs CANN" in res.stdout and "ASCEND_CANN_PACKAGE_PATH" in res.stdout


def test_cann_path_plans_the_op_package_and_its_absence_does_not(tmp_path):
    # ExternalProject only runs CANN's CMake at build time, so a configure with a (fake) CANN path
    # shows the plan without needing CANN.
    with_cann = _configure(f"-DASCEND_CANN_PACKAGE_PATH={tmp_path}")
    assert with_cann.returncode == 0, with_cann.stdout[-3000:]
    assert f"CANN at {tmp_path}: building the custom op package" in with_cann.stdout
    without = _configure()
    assert without.returncode == 0 and "custom op package" not in without.stdout


def test_host_model_configures_standalone(tmp_path):
    # host_model/ is also a CMake project of its own (docs/host_model.md); configuring it is enough to
    # check that, its sources are compiled in the shared tree above.
    res = subprocess.run([cmake_tree.CMAKE, "-S", str(cmake_tree.ROOT / "host_model"), "-B", str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert res.returncode == 0, res.stdout[-3000:]
    listed = cmake_tree.run([cmake_tree.CTEST, "-N"], cwd=tmp_path)
    assert re.search(r"Test\s+#1: host_model_tests$", listed.stdout, flags=re.M), listed.stdout

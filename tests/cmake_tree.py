"""The one CMake build of the top-level CMakeLists.txt that every test needing a C++ binary shares
(test_host_model.py, test_cmake_build.py, test_tiling_grid.py).

The tree is build/cmake in the repository: the same tree in which ``pip install -e .`` builds the
Python module (setup.py), with the same build type and options. So the test run compiles only what pip
did not (the C++ test executables), pip and the tests never compile the libraries twice, and a second
test run compiles nothing that has not changed. Without a pip build the tests configure the tree
themselves, and a later pip install reuses it.

Sharing needs the same CMake as pip: another version orders the compiler flags differently, so ninja
would recompile everything. pip builds with the PyPI cmake package (a build requirement), which the
test extra installs too; the tests use that one when it is installed, else the cmake on PATH.

Each target is built at most once per pytest process; a file lock keeps pytest processes that run at
the same time (pytest-xdist workers, two runs) from building in the tree at once.
"""

from __future__ import annotations

import fcntl
import functools
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / "build" / "cmake"
#: The executables that ctest runs (op_host/tests, host_model/tests).
CTEST_TARGETS = ("test_tiling", "host_model_tests")


def _tool(name: str) -> str | None:
    try:
        import cmake

        path = Path(cmake.CMAKE_BIN_DIR) / name
        if path.is_file():
            return str(path)
    except ImportError:
        pass
    return shutil.which(name)


#: cmake and ctest: the PyPI cmake package's when installed (pip builds with it), else PATH's.
CMAKE, CTEST = _tool("cmake"), _tool("ctest")


def tools_missing() -> str | None:
    """Why the C++ tests cannot run here (None when cmake and a C++ compiler are there)."""
    if CMAKE is None or CTEST is None:
        return "cmake/ctest not found (pip install cmake, or put them on PATH)"
    if shutil.which("c++") is None and shutil.which("g++") is None:
        return "no C++ compiler (c++/g++) on PATH"
    return None


def run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run a command, stdout and stderr together as text."""
    return subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


class _Lock:
    def __enter__(self):
        TREE.mkdir(parents=True, exist_ok=True)
        self._file = open(TREE.parent / "cmake.lock", "w")
        fcntl.flock(self._file, fcntl.LOCK_EX)

    def __exit__(self, *exc):
        self._file.close()  # releases the lock


@functools.lru_cache(maxsize=None)
def build_dir() -> Path:
    """Configure :data:`TREE` (again, if pip configured it) with the tests on; raise with CMake's log
    on failure.

    The options match setup.py's, so reconfiguring recompiles nothing pip built. The Python module is
    left out here (``PASA_BUILD_PYTHON=OFF``): pip builds it, against the pybind11 of its own build
    environment, which no longer exists once pip has finished; pip turns it back on when it runs.
    """
    cmd = [CMAKE, "-S", str(ROOT), "-B", str(TREE), "-DCMAKE_BUILD_TYPE=Release", "-DPASA_BUILD_TESTS=ON",
           "-DPASA_BUILD_PYTHON=OFF", "-DPASA_ENABLE_CANN=OFF", "-DPASA_BUILD_NPU_EXT=OFF"]
    with _Lock():
        if shutil.which("ninja") and not (TREE / "CMakeCache.txt").exists():
            cmd += ["-G", "Ninja"]  # as setup.py: the generator of an existing tree cannot change
        res = run(cmd)
    if res.returncode != 0:
        raise RuntimeError(f"cmake configure failed ({' '.join(cmd)}):\n{res.stdout[-6000:]}")
    return TREE


@functools.lru_cache(maxsize=None)
def build(*targets: str) -> Path:
    """Build ``targets`` in :func:`build_dir`; return the build directory."""
    tree = build_dir()
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    with _Lock():
        res = run([CMAKE, "--build", str(tree), "--parallel", jobs, "--target", *targets])
    if res.returncode != 0:
        raise RuntimeError(f"cmake --build --target {' '.join(targets)} failed:\n{res.stdout[-8000:]}")
    return tree

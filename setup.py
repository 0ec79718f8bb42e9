"""Build the C++ parts of pasa-npu through the top-level CMakeLists.txt.

The package metadata lives in pyproject.toml; this file only adds the extension modules, which CMake
builds (setuptools' own compiler driver knows nothing of the host model, the kernel sources or CANN):

* ``pasa_npu._npu_host_model`` (always): the AscendC kernel compiled with g++ against our host
  functional model of the AscendC API, with the host tiling; a pybind11 module.
* ``pasa_npu._npu_ext`` (only with ``PASA_BUILD_NPU_EXT=1``, which scripts/build_and_deploy.sh sets;
  needs CANN, torch and torch_npu, so build it with ``pip install --no-build-isolation``): the
  torch_npu binding that calls the deployed custom op through aclnn.

Only the needed targets are built, at -O2, with as many jobs as CPUs (``CMAKE_BUILD_PARALLEL_LEVEL``
overrides), so that ``pip install -e .`` stays near a minute on 2 cores. The CMake tree is build/cmake
in the source tree, not setuptools' build_temp (a temporary folder for editable installs): a reinstall
then recompiles only what changed, and the tests build their C++ executables in the same tree
(tests/cmake_tree.py) instead of compiling the kernel and the host model again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "on", "true", "yes")


class CMakeExtension(Extension):
    """An extension module that CMake target ``target`` produces (no sources for setuptools)."""

    def __init__(self, name: str, target: str):
        super().__init__(name, sources=[])
        self.target = target


class CMakeBuild(build_ext):
    def run(self):
        cmake = shutil.which("cmake")
        if cmake is None:
            raise RuntimeError("building pasa-npu needs CMake >= 3.18 (pip installs it as a build requirement; "
                               "with --no-build-isolation install it: pip install cmake, or apt install cmake)")
        self._cmake = cmake
        self._configured = False
        super().run()

    def build_extension(self, ext: CMakeExtension):
        out_dir = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        build_dir = ROOT / "build" / "cmake"
        build_dir.mkdir(parents=True, exist_ok=True)
        if not self._configured:
            self._configure(build_dir, out_dir)
            self._configured = True
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.run([self._cmake, "--build", str(build_dir), "--target", ext.target, "--parallel", jobs],
                       check=True)

    def _configure(self, build_dir: Path, out_dir: Path):
        import pybind11

        npu_ext = _flag("PASA_BUILD_NPU_EXT")
        args = [
            self._cmake, "-S", str(ROOT), "-B", str(build_dir),
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
            f"-DPASA_PYTHON_OUTPUT_DIR={out_dir}",
            # The test targets are only declared (pip builds none of them), so that the tests, which
            # configure this tree with them, and pip do not undo each other's configuration.
            "-DPASA_BUILD_TESTS=ON",
            "-DPASA_BUILD_PYTHON=ON",
            # The op package is built by scripts/build_and_deploy.sh, not by pip.
            f"-DPASA_ENABLE_CANN={'ON' if npu_ext else 'OFF'}",
            f"-DPASA_BUILD_NPU_EXT={'ON' if npu_ext else 'OFF'}",
        ]
        if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
            args += ["-G", "Ninja"]
        subprocess.run(args, check=True)


ext_modules = [CMakeExtension("pasa_npu._npu_host_model", "_npu_host_model")]
if _flag("PASA_BUILD_NPU_EXT"):
    ext_modules.append(CMakeExtension("pasa_npu._npu_ext", "_npu_ext"))

setup(ext_modules=ext_modules, cmdclass={"build_ext": CMakeBuild})

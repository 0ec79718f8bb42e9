"""scripts/build_and_deploy.sh on every path short of a real NPU and a real CANN.

Each test builds a fake world in a temporary directory: a CANN tree with only its version info file,
and fake `cmake`, `npu-smi`, Python and `.run` package executables that log their arguments (and the
environment the script gives them) and fail on request. The script must stop with its documented exit
code and message when a prerequisite is missing, and otherwise run the build, install, extension and
check steps in order with the right arguments.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build_and_deploy.sh"

# Fake commands. Each appends "<name> <args>" to $FAKE_LOG; behaviour is steered by FAKE_* variables.
FAKE_CMAKE = r"""#!/usr/bin/env bash
echo "cmake $*" >> "$FAKE_LOG"
if [[ "$1" == "--build" ]]; then
    [[ "${FAKE_BUILD_FAIL:-0}" == 1 ]] && { echo "compile error" >&2; exit 1; }
    if [[ "${FAKE_NO_RUN_PKG:-0}" != 1 ]]; then
        mkdir -p "$2" && cp "$FAKE_RUN_TEMPLATE" "$2/custom_opp_ubuntu_x86_64.run"
    fi
fi
exit 0
"""
FAKE_RUN_PKG = r"""#!/usr/bin/env bash
echo "runpkg $*" >> "$FAKE_LOG"
[[ "${FAKE_INSTALL_FAIL:-0}" == 1 ]] && exit 1
for a in "$@"; do
    case "$a" in
        --install-path=*)
            d="${a#*=}/vendors/pasa"
            mkdir -p "$d/bin"
            echo "export ASCEND_CUSTOM_OPP_PATH=$d:\${ASCEND_CUSTOM_OPP_PATH:-}" > "$d/bin/set_env.bash" ;;
    esac
done
exit 0
"""
FAKE_PYTHON = r"""#!/usr/bin/env bash
if [[ "$1" == "-c" && "$2" == "import torch_npu" ]]; then exit "${FAKE_TORCH_NPU_RC:-0}"; fi
echo "python $* | PASA_BUILD_NPU_EXT=${PASA_BUILD_NPU_EXT:-} ASCEND_CUSTOM_OPP_PATH=${ASCEND_CUSTOM_OPP_PATH:-}" >> "$FAKE_LOG"
if [[ "$1" == "-m" && "$2" == "pip" ]]; then exit "${FAKE_PIP_RC:-0}"; fi
if [[ "$1" == *npu_check.py ]]; then exit "${FAKE_CHECK_RC:-0}"; fi
exit 0
"""
# The header check's compiler (scripts/check_ascendc_headers.sh --cann): logs to its own file.
FAKE_CXX = r"""#!/usr/bin/env bash
echo "cxx $*" >> "$FAKE_CXX_LOG"
exit "${FAKE_CXX_RC:-0}"
"""
FAKE_NPU_SMI = r"""#!/usr/bin/env bash
echo "npu-smi $*" >> "$FAKE_LOG"
exit "${FAKE_NPU_SMI_RC:-0}"
"""


def _exe(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


class World:
    """A fake machine: CANN tree, fake commands on PATH, a log of what ran."""

    def __init__(self, tmp: Path, version: str | None = "9.0.0", npu_smi: bool = True, asc_cmake: bool = True):
        self.tmp = tmp
        self.bin = tmp / "bin"
        self.bin.mkdir()
        self.log = tmp / "log.txt"
        self.log.write_text("")
        self.cann = tmp / "cann"
        info_dir = self.cann / f"{platform.machine()}-linux"
        info_dir.mkdir(parents=True)
        if version is not None:
            (info_dir / "ascend_toolkit_install.info").write_text(
                f"package_name=Ascend-cann-toolkit\nversion={version}\ninnerversion=V100R001\narch=x86_64\n")
        if asc_cmake:  # where asc-devkit installs the config find_package(ASC) reads
            (info_dir / "lib64" / "cmake").mkdir(parents=True)
            (info_dir / "lib64" / "cmake" / "asc-config.cmake").write_text("# fake\n")
        # the toolkit's headers where the header check looks for them (its asc/ tree, tikicpulib, include/)
        for d in ("asc/include", "tools/tikicpulib/lib/include", "include"):
            (self.cann / d).mkdir(parents=True, exist_ok=True)
        (self.cann / "asc" / "include" / "kernel_operator.h").write_text("")
        _exe(self.bin / "fakecxx", FAKE_CXX)
        self.cxx_log = tmp / "cxx.txt"
        _exe(self.bin / "cmake", FAKE_CMAKE)
        if npu_smi:
            _exe(self.bin / "npu-smi", FAKE_NPU_SMI)
        self.python = _exe(tmp / "fakepython", FAKE_PYTHON)
        self.run_template = _exe(tmp / "run_template.sh", FAKE_RUN_PKG)
        self.build_dir = tmp / "build"
        self.env = {
            "PATH": f"{self.bin}:/usr/bin:/bin", "HOME": str(tmp), "ASCEND_HOME_PATH": str(self.cann),
            "FAKE_LOG": str(self.log), "FAKE_RUN_TEMPLATE": str(self.run_template),
            "CXX": "fakecxx", "FAKE_CXX_LOG": str(self.cxx_log),
        }

    def run(self, *args: str, **fake_env: str) -> subprocess.CompletedProcess:
        env = {**self.env, **fake_env}
        env = {k: v for k, v in env.items() if v is not None}
        return subprocess.run(["bash", str(SCRIPT), "--python", str(self.python), "--build-dir",
                               str(self.build_dir), *args],
                              env=env, cwd=self.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def ran(self) -> list[str]:
        return [line for line in self.log.read_text().splitlines() if not line.startswith("npu-smi")]


@pytest.fixture
def world(tmp_path):
    return World(tmp_path)


def test_help_documents_options_and_exit_codes():
    res = subprocess.run(["bash", str(SCRIPT), "--help"], stdout=subprocess.PIPE, text=True)
    assert res.returncode == 0
    for word in ("--install-path", "--dry-run", "--build-only", "--python", "ASCEND_HOME_PATH", "npu-smi"):
        assert word in res.stdout
    for code in ("10", "11", "12", "13", "14", "20", "21", "22", "23", "24"):
        assert f"({code}" in res.stdout or f" {code}," in res.stdout or f" {code}" in res.stdout


def test_unknown_option_is_a_usage_error(world):
    res = world.run("--frobnicate")
    assert res.returncode == 2 and "unknown option: --frobnicate" in res.stderr


@pytest.mark.parametrize("option", ["--install-path", "--build-dir"])
def test_option_without_value_is_a_usage_error(world, option):
    res = subprocess.run(["bash", str(SCRIPT), option], env=world.env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert res.returncode == 2 and f"{option} needs" in res.stderr


def test_no_cann(world):
    res = world.run(ASCEND_HOME_PATH=None)
    assert res.returncode == 10
    assert "CANN not found" in res.stderr and "set_env.sh" in res.stderr and world.ran() == []


def test_cann_path_that_is_not_a_directory(world):
    res = world.run(ASCEND_HOME_PATH=str(world.tmp / "nowhere"))
    assert res.returncode == 10 and "is not a directory" in res.stderr


def test_cann_package_path_wins_over_home_path(world):
    res = world.run("--dry-run", ASCEND_CANN_PACKAGE_PATH=str(world.cann), ASCEND_HOME_PATH=str(world.tmp / "nowhere"))
    assert res.returncode == 0, res.stderr
    assert f"-DASCEND_CANN_PACKAGE_PATH={world.cann}" in res.stdout


def test_cann_without_version_info(tmp_path):
    w = World(tmp_path, version=None)
    res = w.run()
    assert res.returncode == 11 and "cannot read the CANN version" in res.stderr


@pytest.mark.parametrize("version", ["8.0.RC3", "8.2.RC1", "8.3.RC1", "7.0.0", "9.2.0", "9.2.RC1", "10.1.RC2"])
def test_unsupported_cann_version(tmp_path, version):
    w = World(tmp_path, version=version)
    res = w.run()
    assert res.returncode == 11
    assert res.stderr.count("\n") == 1, res.stderr  # one line
    assert f"unsupported CANN version {version}" in res.stderr and "supported are 8.5 to 9.1.x" in res.stderr
    assert w.ran() == []


def test_unparsable_cann_version(tmp_path):
    res = World(tmp_path, version="latest").run()
    assert res.returncode == 11 and "cannot parse the CANN version 'latest'" in res.stderr


@pytest.mark.parametrize("version, number", [("8.5.0", 805), ("8.5.RC1", 805), ("9.0.0", 900), ("9.0.RC1", 900),
                                             ("9.1.0", 901)])
def test_supported_cann_versions(tmp_path, version, number):
    res = World(tmp_path, version=version).run("--dry-run")
    assert res.returncode == 0, res.stderr
    assert f"CANN {version} at" in res.stdout
    assert f"-DPASA_CANN_VERSION={number} " in res.stdout  # op_host/pasa_cann_compat.h chooses the tiling API


def test_cann_85_names_its_asc_config_ascconfig(tmp_path):
    w = World(tmp_path, version="8.5.0", asc_cmake=False)
    cmake_dir = w.cann / f"{platform.machine()}-linux" / "lib64" / "cmake"
    cmake_dir.mkdir(parents=True)
    (cmake_dir / "ASCConfig.cmake").write_text("# fake\n")
    res = w.run("--dry-run")
    assert res.returncode == 0, res.stderr
    assert f"-DASC_DIR={cmake_dir}" in res.stdout


def test_cann_without_the_asc_cmake_package(tmp_path):
    w = World(tmp_path, asc_cmake=False)
    res = w.run("--dry-run")
    assert res.returncode == 14 and "no asc-config.cmake" in res.stderr and w.ran() == []


def test_configure_points_find_package_at_the_asc_config(world):
    res = world.run("--dry-run")
    assert res.returncode == 0, res.stderr
    assert f"-DASC_DIR={world.cann}/{platform.machine()}-linux/lib64/cmake" in res.stdout


def test_no_torch_npu(world):
    res = world.run(FAKE_TORCH_NPU_RC="1")
    assert res.returncode == 12 and "torch_npu is not importable" in res.stderr and world.ran() == []


def test_python_not_found(world):
    env = {**world.env}
    res = subprocess.run(["bash", str(SCRIPT), "--python", str(world.tmp / "nopython")], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert res.returncode == 12 and "not found" in res.stderr


def test_no_npu_smi(tmp_path):
    w = World(tmp_path, npu_smi=False)
    res = w.run()
    assert res.returncode == 13 and "no NPU" in res.stderr and "--build-only" in res.stderr and w.ran() == []


def test_npu_smi_failing(world):
    res = world.run(FAKE_NPU_SMI_RC="1")
    assert res.returncode == 13 and "npu-smi info" in res.stderr


def test_dry_run_prints_every_step_and_runs_none(world):
    inst = world.tmp / "opp"
    res = world.run("--dry-run", "--install-path", str(inst))
    assert res.returncode == 0, res.stderr
    lines = [line for line in res.stdout.splitlines() if line.startswith("+ ")]
    assert lines[0] == (f"+ bash {ROOT}/scripts/check_ascendc_headers.sh --cann {world.cann} "
                        f"--build-dir {world.build_dir}/header_check")
    assert lines[1].startswith(f"+ cmake -S {ROOT}/cann -B {world.build_dir}")
    assert lines[2].startswith(f"+ cmake --build {world.build_dir} --target binary package")
    assert any(f"custom_opp_<os>_<arch>.run --install-path={inst}" in line for line in lines)
    assert any("PASA_BUILD_NPU_EXT=1" in line and "pip install --no-build-isolation" in line for line in lines)
    assert lines[-1].endswith("scripts/npu_check.py")
    assert world.ran() == [] and not inst.exists()


def test_full_run_with_an_npu(world):
    inst = world.tmp / "opp"
    res = world.run("--install-path", str(inst))
    assert res.returncode == 0, res.stderr
    ran = world.ran()
    assert ran[0].startswith(f"cmake -S {ROOT}/cann -B {world.build_dir} -DASCEND_CANN_PACKAGE_PATH={world.cann}")
    assert ran[1].startswith(f"cmake --build {world.build_dir} --target binary package")
    assert ran[2] == f"runpkg --install-path={inst}"
    vendor = inst / "vendors" / "pasa"
    # pip builds the extension with the flag, and sees the sourced vendor path; then the on-device check.
    assert ran[3].startswith(f"python -m pip install --no-build-isolation {ROOT} | PASA_BUILD_NPU_EXT=1 "
                             f"ASCEND_CUSTOM_OPP_PATH={vendor}:")
    assert ran[4].startswith(f"python {ROOT}/scripts/npu_check.py | ")
    assert len(ran) == 5 and "matches the golden model" in res.stdout
    # before the build, the header check compiled the kernel and op_host/ against the toolkit's own headers
    compiled = world.cxx_log.read_text()
    assert "op_kernel/pasa_fused_attention.cpp" in compiled and "op_host/pasa_tiling.cpp" in compiled
    assert f"-isystem{world.cann}/tools/tikicpulib/lib/include" in compiled


def test_a_kernel_that_does_not_compile_against_the_toolkits_headers_stops_before_the_build(world):
    res = world.run("--install-path", str(world.tmp / "opp"), FAKE_CXX_RC="1")
    assert res.returncode == 24 and "check_ascendc_headers.sh" in res.stderr
    assert world.ran() == []  # nothing built or installed


def test_relative_install_path_is_made_absolute(world):
    res = world.run("--install-path", "rel/opp")
    assert res.returncode == 0, res.stderr
    assert f"runpkg --install-path={world.tmp}/rel/opp" in world.ran()


def test_default_install_path_uses_canns_vendors(world):
    res = world.run()
    assert res.returncode == 0, res.stderr
    assert "runpkg " in world.ran()  # no --install-path argument
    assert "$ASCEND_OPP_PATH/vendors/pasa" in res.stdout


def test_build_only_without_an_npu_skips_the_check(tmp_path):
    w = World(tmp_path, npu_smi=False)
    res = w.run("--build-only")
    assert res.returncode == 0, res.stderr
    ran = w.ran()
    assert not any("npu_check.py" in r for r in ran) and any("pip install" in r for r in ran)
    assert "on-device check needs an NPU" in res.stdout


@pytest.mark.parametrize("fault, code, message", [
    ({"FAKE_BUILD_FAIL": "1"}, 20, "command failed: cmake --build"),
    ({"FAKE_NO_RUN_PKG": "1"}, 20, "no custom_opp_*.run"),
    ({"FAKE_INSTALL_FAIL": "1"}, 21, "command failed: bash"),
    ({"FAKE_PIP_RC": "1"}, 22, "pip install"),
    ({"FAKE_CHECK_RC": "1"}, 23, "npu_check.py"),
])
def test_failures_after_the_checks_have_their_own_codes(world, fault, code, message):
    res = world.run("--install-path", str(world.tmp / "opp"), **fault)
    assert res.returncode == code, (res.stdout, res.stderr)
    assert message in res.stderr


def test_npu_check_without_the_backend_says_why():
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "npu_check.py")], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "python")})
    if "not available" not in res.stderr:
        pytest.skip("the npu backend is available here: npu_check.py runs the on-device check instead")
    assert res.returncode == 3 and "npu backend is not available: torch_npu" in res.stderr

"""scripts/check_ascendc_headers.sh: op_kernel/ and op_host/ type-checked against CANN's real headers.

* Always (CI): the script's own logic with a fake compiler and fake header trees: it finds every tiling key the
  kernel entry dispatches and compiles each for the AIC and the AIV, plus op_host/*.cpp, and reports a compiler
  error at the line of ours in its instantiation chain.
* With ASC_DEVKIT_DIR (an asc-devkit checkout; op_host/ too with METADEF_DIR and GE_DIR, metadef and ge
  checkouts): the real check passes on this repository, and fails, at our line, on a scratch copy with a
  deliberate misuse (a missing argument, a wrong template argument). CI cannot fetch the headers.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pasa_npu.precision import ALLOCATIONS

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_ascendc_headers.sh"
E_FAILED, E_HEADERS = 40, 41


def run(*args: str, env: dict | None = None, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True, timeout=3600,
                          env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), **(env or {})})


# ---- the script's logic, with a fake compiler --------------------------------------------------------------
FAKE_CXX = r"""#!/usr/bin/env bash
if [[ " $* " == *" -E "* ]]; then  # preprocessing: the keys' expanded TILING_KEY_IS tests into the -o file
    out=""; prev=""
    for a in "$@"; do [[ "$prev" == "-o" ]] && out=$a; prev=$a; done
    for k in $FAKE_KEYS; do echo "if ((g_tilingKey == ($k))) run();"; done > "$out"
    exit 0
fi
echo "$*" >> "$FAKE_LOG"
src="${@: -1}"
if [[ -n "${FAKE_FAIL:-}" && "$*" == *"$FAKE_FAIL"* ]]; then
    cat "$FAKE_ERRORS" >&2
    exit 1
fi
exit 0
"""


@pytest.fixture
def fake(tmp_path):
    """A fake asc-devkit, metadef and ge, and a fake g++ that logs its command lines."""
    asc = tmp_path / "asc"
    (asc / "include").mkdir(parents=True)
    (asc / "include" / "kernel_operator.h").write_text("")
    (asc / "version.cmake").write_text('set_package(asc-devkit VERSION "9.0.0")\n')
    gen = asc / "impl" / "adv_api" / "cmake" / "scripts" / "gen_kernel_tiling_data_def.py"
    gen.parent.mkdir(parents=True)
    gen.write_text("import pathlib, sys\np = pathlib.Path(sys.argv[2])\np.parent.mkdir(parents=True, exist_ok=True)\n"
                   "p.write_text('')\n")
    metadef, ge = tmp_path / "metadef", tmp_path / "ge"
    for f in (metadef / "inc/external/asc/register/op_def_registry.h",
              metadef / "inc/external/exe_graph/runtime/tiling_context.h",
              ge / "inc/graph_metadef/external/graph/operator_reg.h"):
        f.parent.mkdir(parents=True)
        f.write_text("")
    cxx = tmp_path / "fake-g++"
    cxx.write_text(FAKE_CXX)
    cxx.chmod(0o755)
    log = tmp_path / "log.txt"
    env = {"CXX": str(cxx), "FAKE_LOG": str(log), "FAKE_ERRORS": str(tmp_path / "errors.txt"),
           "FAKE_KEYS": " ".join(kernel_keys())}
    return {"asc": asc, "metadef": metadef, "ge": ge, "env": env, "log": log, "tmp": tmp_path}


def kernel_keys() -> list[str]:
    """The tiling keys of PASA_KERNEL_ALLOCATIONS, whose rows the entry's TILING_KEY_IS tests are generated from."""
    text = (ROOT / "op_kernel" / "pasa_allocation.h").read_text()
    rows = text.split("#define PASA_KERNEL_ALLOCATIONS(X)", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"X\((\d+), \w+\)", rows)


def test_every_tiling_key_for_both_cores_and_every_host_source(fake):
    res = run("--metadef", str(fake["metadef"]), "--ge", str(fake["ge"]), "--build-dir", str(fake["tmp"] / "b"),
              str(fake["asc"]), env=fake["env"])
    assert res.returncode == 0, res.stdout + res.stderr
    lines = fake["log"].read_text().splitlines()
    keys = kernel_keys()
    # the kernel's rows are the allocations precision.py gives a kernel key, by number
    assert sorted(keys) == sorted(str(a.kernel_key) for a in ALLOCATIONS.values() if a.kernel_key is not None)
    kernel = [line for line in lines if line.endswith("op_kernel/pasa_fused_attention.cpp")]
    seen = {(re.search(r"-DTILING_KEY_VAR=(\w+)", line).group(1), "__DAV_C220_CUBE__" in line,
             "__DAV_C220_VEC__" in line) for line in kernel}
    assert seen == {(k, True, False) for k in keys} | {(k, False, True) for k in keys}
    for line in kernel:  # asc-devkit's CPU-mode flags, the stand-ins, the generated kernel_tiling directory
        for flag in ("-std=c++17", "-DASCENDC_CPU_DEBUG=1", "-D__NPU_ARCH__=2201", "-D__DAV_C220__",
                     "-fsyntax-only", f"-isystem{ROOT}/scripts/ascendc_check/tikicpulib",
                     f"-isystem{fake['asc']}/include", f"-isystem{fake['tmp']}/b/generated"):
            assert flag in line.split(), (flag, line)
    host = sorted(line.split()[-1] for line in lines if "/op_host/" in line.split()[-1])
    assert host == sorted(str(p) for p in (ROOT / "op_host").glob("*.cpp"))
    # op_host/pasa_cann_compat.h chooses the tiling API by the version of the checkout: 9.0 -> 900
    assert all("-DPASA_CANN_VERSION=900" in line.split() for line in lines if "/op_host/" in line.split()[-1])
    assert f"all {len(kernel) + len(host)} configurations compile" in res.stdout


@pytest.mark.parametrize("version_file, text, number", [
    ("version.info", "Version=8.5.0-beta.1\nversion_dir=cann\n", 805),  # asc-devkit v8.5.0
    ("version.cmake", 'set_cann_package(asc-devkit VERSION "9.1.0")\n', 901),  # from 9.1
])
def test_op_host_gets_the_version_of_the_checkout(fake, version_file, text, number):
    (fake["asc"] / "version.cmake").unlink()
    (fake["asc"] / version_file).write_text(text)
    res = run("--metadef", str(fake["metadef"]), "--ge", str(fake["ge"]), "--build-dir", str(fake["tmp"] / "b"),
              str(fake["asc"]), env=fake["env"])
    assert res.returncode == 0, res.stdout + res.stderr
    host = [line.split() for line in fake["log"].read_text().splitlines() if "/op_host/" in line.split()[-1]]
    assert host and all(f"-DPASA_CANN_VERSION={number}" in flags for flags in host)


def test_a_checkout_without_a_version_is_refused_for_op_host(fake):
    (fake["asc"] / "version.cmake").unlink()
    res = run("--metadef", str(fake["metadef"]), "--ge", str(fake["ge"]), "--build-dir", str(fake["tmp"] / "b"),
              str(fake["asc"]), env=fake["env"])
    assert res.returncode == E_HEADERS and "cannot tell the CANN version" in res.stderr


def test_without_metadef_and_ge_op_host_is_not_checked_and_it_says_so(fake):
    res = run("--build-dir", str(fake["tmp"] / "b"), str(fake["asc"]), env=fake["env"])
    assert res.returncode == 0, res.stderr
    assert "op_host/ is not checked" in res.stdout
    assert not any("/op_host/" in line for line in fake["log"].read_text().splitlines())


def test_an_error_is_reported_at_the_line_of_ours_that_causes_it(fake):
    # A compiler error inside asc-devkit's headers, reached from our code: the report names our innermost line.
    ours = ROOT / "op_kernel" / "pasa_vector_rows.h"
    (fake["tmp"] / "errors.txt").write_text(
        f"{fake['asc']}/impl/x.h: In instantiation of 'void AscendC::CastImpl(T*, U*) [with T = half; U = half]':\n"
        f"{fake['asc']}/impl/y.h:191:13:   required from 'void AscendC::Cast(...)'\n"
        f"{ours}:361:17:   required from 'pasa_kernel::AivRows<T>::LoadScores(...)'\n"
        f"{ROOT}/op_kernel/pasa_fused_attention.cpp:73:36:   required from here\n"
        f"{fake['asc']}/impl/x.h:1016:31: error: no matching function for call to "
        "'CastIntrinsicsImpl(half*&, half*&)'\n")
    res = run("--build-dir", str(fake["tmp"] / "b"), str(fake["asc"]),
              env={**fake["env"], "FAKE_FAIL": "__DAV_C220_VEC__"})
    assert res.returncode == E_FAILED
    failed = [line for line in res.stdout.splitlines() if "FAILED" in line]
    assert len(failed) == len(kernel_keys()) and all(":AIV:" in line for line in failed)
    assert "  op_kernel/pasa_vector_rows.h:361: error: no matching function for call to 'CastIntrinsicsImpl" \
           in res.stdout
    assert f"{len(kernel_keys())} of {2 * len(kernel_keys())} configurations do not compile" in res.stderr


def test_bad_arguments(fake, tmp_path):
    res = run("--help")
    assert res.returncode == 0 and "ASC_DEVKIT_DIR" in res.stdout and "--cann" in res.stdout
    assert run().returncode == 2
    assert run("--frobnicate", str(fake["asc"])).returncode == 2
    assert run("--metadef", str(fake["metadef"]), str(fake["asc"])).returncode == 2  # --ge missing
    res = run(str(tmp_path / "nowhere"), env=fake["env"])
    assert res.returncode == E_HEADERS and "not an asc-devkit checkout" in res.stderr
    (tmp_path / "empty").mkdir()
    res = run("--cann", str(tmp_path / "empty"), env=fake["env"])
    assert res.returncode == E_HEADERS and "asc/include/kernel_operator.h" in res.stderr


def test_installed_toolkit_uses_its_own_tikicpulib_and_include(fake):
    cann = fake["tmp"] / "cann"
    (cann / "asc" / "include").mkdir(parents=True)
    (cann / "asc" / "include" / "kernel_operator.h").write_text("")
    (cann / "tools" / "tikicpulib" / "lib" / "include").mkdir(parents=True)
    (cann / "include").mkdir()
    (cann / f"{platform.machine()}-linux").mkdir()
    (cann / f"{platform.machine()}-linux" / "ascend_toolkit_install.info").write_text("version=9.0.RC1\n")
    res = run("--cann", str(cann), "--build-dir", str(fake["tmp"] / "b"), env=fake["env"])
    assert res.returncode == 0, res.stderr
    lines = fake["log"].read_text().splitlines()
    kernel = [line.split() for line in lines if line.endswith(".cpp") and "/op_kernel/" in line]
    host = [line.split() for line in lines if "/op_host/" in line.split()[-1]]
    assert len(kernel) == 2 * len(kernel_keys()) and host
    for flags in kernel:
        assert f"-isystem{cann}/tools/tikicpulib/lib/include" in flags and f"-isystem{cann}/include" in flags
        assert not any("scripts/ascendc_check/tikicpulib" in f for f in flags)
    for flags in host:
        assert f"-isystem{cann}/include" in flags and not any("ascendc_check/host" in f for f in flags)


# ---- the real check ----------------------------------------------------------------------------------------
ASC = os.environ.get("ASC_DEVKIT_DIR")
METADEF, GE = os.environ.get("METADEF_DIR"), os.environ.get("GE_DIR")
needs_asc = pytest.mark.skipif(
    not ASC, reason="ASC_DEVKIT_DIR is not set: the check needs an asc-devkit checkout "
                    "(github.com/mirror-cann/asc-devkit), which CI cannot fetch")


def host_args() -> list[str]:
    return ["--metadef", METADEF, "--ge", GE] if METADEF and GE else []


@needs_asc
@pytest.mark.slow
def test_this_repository_compiles_against_the_real_headers(tmp_path):
    res = run(*host_args(), "--build-dir", str(tmp_path / "b"), ASC)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("ok      op_kernel/") == 2 * len(kernel_keys())
    if host_args():
        assert res.stdout.count("ok      op_host/") == len(list((ROOT / "op_host").glob("*.cpp")))


# A deliberate misuse in a scratch copy, found generically (the kernel's files may be reorganised).
MISUSES = {
    "missing argument": (r"\bMmad\((\w+), (\w+), (\w+), (\w+)\);", r"Mmad(\1, \2, \3);"),
    "wrong template argument": (r"\bFixpipe<(\w+), float, ", r"Fixpipe<\1, half, "),
}


@needs_asc
@pytest.mark.slow
@pytest.mark.parametrize("misuse", sorted(MISUSES))
def test_a_deliberate_misuse_is_reported_at_its_line(tmp_path, misuse):
    copy = tmp_path / "repo"
    for part in ("op_kernel", "op_host"):
        shutil.copytree(ROOT / part, copy / part, ignore=shutil.ignore_patterns("tests"))
    pattern, replacement = MISUSES[misuse]
    for path in sorted((copy / "op_kernel").glob("*.h")):
        text = path.read_text()
        m = re.search(pattern, text)
        if m:
            path.write_text(text[:m.start()] + re.sub(pattern, replacement, m.group(0)) + text[m.end():])
            line = text.count("\n", 0, m.start()) + 1
            break
    else:
        pytest.fail(f"no call matching {pattern} in op_kernel/: update MISUSES to the kernel's code")
    res = run("--root", str(copy), "--build-dir", str(tmp_path / "b"), ASC)
    assert res.returncode == E_FAILED, res.stdout + res.stderr
    at = f"  op_kernel/{path.name}:{line}: error: "
    failed = [block for block in res.stdout.split("check_ascendc_headers: ")[1:] if block.startswith("FAILED")]
    assert len(failed) == 2 * len(kernel_keys())
    assert all(at in block for block in failed), res.stdout

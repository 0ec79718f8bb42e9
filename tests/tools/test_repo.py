"""The README's quick start and CI stay in step: CI runs exactly the README's test command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S)]


def test_quick_start_has_exactly_two_one_line_commands():
    commands = _quick_start_commands()
    assert len(commands) == 2
    assert all("\n" not in c for c in commands)
    assert commands[0].endswith("pasa-npu accuracy")
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    commands = [line for line in ci if line and not line.startswith(("#", "set ", "cd "))]
    assert commands == [_quick_start_commands()[1]]


def test_readme_api_example_runs_and_says_true():
    """The README's example, over 5 seeds: finite, within 2x of FP32 FlashAttention's error against
    float64, where FP16 FlashAttention gives NaN."""
    import torch

    import pasa_npu
    from pasa_npu import golden, metrics

    readme = (ROOT / "README.md").read_text()
    code = re.findall(r"```python\n(.*?)```", readme.split("## One call", 1)[1], flags=re.S)[0]
    for seed in range(5):
        ns: dict = {}
        torch.manual_seed(seed)
        exec(code, ns)
        q, k, v, out, lse = (ns[x] for x in ("q", "k", "v", "out", "lse"))
        assert out.shape == q.shape and out.dtype == torch.float16 and lse.shape == (*q.shape[:3], 1)
        kw = dict(num_heads=q.shape[1], input_layout="BNSD", scale=q.shape[-1] ** -0.5)
        ref, _ = golden.reference(q.numpy(), k.numpy(), v.numpy(), scale=kw["scale"])
        fa32, _ = pasa_npu.fused_attention(q, k, v, precision="fp32", **kw)
        assert torch.isfinite(out).all()
        assert metrics.rmse(out, ref) <= 2 * metrics.rmse(fa32, ref), seed
        fa16, _ = pasa_npu.fused_attention(q, k, v, precision="fp16", safety_net=False, **kw)
        assert torch.isnan(fa16).any()


def test_golden_model_needs_numpy_only():
    """The oracle, the β solver and the study import no torch (the package imports it lazily)."""
    import subprocess
    import sys

    code = ("import sys; import pasa_npu.golden, pasa_npu.beta, pasa_npu.accuracy, pasa_npu.cli; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_the_operator_imports_only_torch_and_numpy():
    """A serving process: importing pasa_npu and running fused_attention (and merge_partials) loads neither
    the study's plotting nor its progress bar nor an integration's library (beyond what torch imports by
    itself: torch.hub takes tqdm when it is installed), and the package requires nothing else at run time
    (the study's dependencies are the extra 'study')."""
    import importlib.metadata
    import subprocess
    import sys

    code = ("import sys, torch; before = set(sys.modules); import pasa_npu; q = torch.randn(1, 2, 8, 16).half(); "
            "out, lse = pasa_npu.fused_attention(q, q, q, num_heads=2, input_layout='BNSD', softmax_lse_flag=True); "
            "pasa_npu.merge_partials([out, out], [lse, lse]); "
            "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
            "loaded = sorted(new & {'matplotlib', 'tqdm', 'transformers', 'diffusers', 'pandas', 'scipy'}); "
            "assert not loaded, loaded")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    runtime = [r for r in importlib.metadata.requires("pasa-npu") if "extra ==" not in r]
    assert sorted(re.split(r"[ <>=!~;\[]", r, maxsplit=1)[0] for r in runtime) == ["numpy", "torch"]


def test_committed_json_files_are_strict_json():
    """Every JSON file under docs/ parses without NaN or Infinity (not JSON: other parsers refuse them), and each
    outside docs/archive/ records the commit it was produced at: a field ``commit`` at its top level or in one of
    its top-level objects (its metadata), a git hash. docs/archive/ holds results that predate the current kernels
    or record no commit (docs/archive/README.md)."""
    import json

    def refuse(constant):
        raise ValueError(f"bare {constant}")

    files = sorted((ROOT / "docs").rglob("*.json"))
    assert files
    archive = ROOT / "docs" / "archive"
    current = [path for path in files if archive not in path.parents]
    assert current and len(current) < len(files)
    for path in files:
        data = json.loads(path.read_text(), parse_constant=refuse)
        if path in current:
            assert isinstance(data, dict), f"{path.relative_to(ROOT)}: a JSON object, with its commit"
            commits = [x["commit"] for x in (data, *data.values()) if isinstance(x, dict) and "commit" in x]
            assert commits and all(isinstance(c, str) and re.fullmatch(r"[0-9a-f]{7,40}", c)
                                   for c in commits), \
                f"{path.relative_to(ROOT)} records no commit: rerun it, or move it to docs/archive/"


def test_transformers_extra_states_the_versions_the_integration_takes():
    """pyproject's ``transformers`` extra and the integration's own check name one range of releases."""
    from pasa_npu.integrations import TRANSFORMERS_VERSIONS

    (lo, hi) = TRANSFORMERS_VERSIONS
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'transformers = ["transformers>={lo[0]}.{lo[1]},<{hi[0]}.{hi[1]}"]' in pyproject


def test_no_test_module_imports_another():
    """Helpers that several test modules use live in tests/support.py: a test module that imports another test
    module would run that module's setup (its skips, its module-level draws) and tie the two files together."""
    import ast

    modules = sorted((ROOT / "tests").rglob("test_*.py"))
    assert modules
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert not name.split(".")[-1].startswith("test_"), \
                    f"{path.relative_to(ROOT)} imports {name}: move what it needs into tests/support.py"

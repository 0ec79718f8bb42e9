"""The accuracy study: generators, per-case metrics, Table 4 and claim bookkeeping, outputs, CLI."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest

import pasa_npu
from pasa_npu import accuracy, beta, cli, golden, metrics
from pasa_npu.accuracy import Case

TINY = (1, 1, 64, 128)  # D = 128 keeps the paper's overflow mechanism (uniform mean 30: QKᵀ ≈ 115200)


def test_uniform_draws_lie_in_the_interval_around_the_mean():
    x = accuracy.draw(Case("uniform", 20, 15), (200_000,), np.random.default_rng(0))
    assert x.min() >= 5 and x.max() <= 35
    assert abs(x.mean() - 20) < 0.1
    assert abs(x.std() - 15 / math.sqrt(3)) < 0.05  # U(a, b) has std (b − a)/√12


def test_hybrid_draws_are_normal_plus_rare_outliers():
    n = 2_000_000
    x = accuracy.draw(Case("hybrid", 20, 1000), (n,), np.random.default_rng(1))
    outliers = np.abs(x - 20) > 8  # N(20, 1) essentially never leaves ±8; N(0, 1000²) rarely stays inside
    expected = n * accuracy.BERNOULLI_P
    assert abs(outliers.sum() - expected) < 5 * math.sqrt(expected)
    inliers = x[~outliers]
    assert abs(inliers.mean() - 20) < 0.01 and abs(inliers.std() - 1) < 0.01


def test_biased_case_has_biased_queries_and_keys_and_a_centred_v():
    x = accuracy.draw(Case("biased", 30, 1), (200_000,), np.random.default_rng(2))
    assert abs(x.mean() - 30) < 0.02 and abs(x.std() - 1) < 0.02
    # run_case draws q, k from the case and v centred: FP16 FA overflows (q·k ≈ 128·900), fp32 does
    # not, and the fp32 output is small (a weighted mean of N(0, 1) values), not ≈ 30
    rows = {r["precision"]: r for r in accuracy.run_case(Case("biased", 30, 1), 0, 0, TINY, ("fp16", "fp32"))}
    assert rows["fp16"]["overflow"] and not rows["fp32"]["overflow"]
    rng = np.random.default_rng(accuracy.case_seed(0, Case("biased", 30, 1), 0))
    q, k = (accuracy.draw(Case("biased", 30, 1), TINY, rng) for _ in range(2))
    v = accuracy.draw(Case("biased", 0, 1), TINY, rng)
    assert abs(v.mean()) < 0.05
    out, _ = golden.attention(q, k, v, precision="fp32", scale=128**-0.5)
    ref, _ = golden.reference(*(x.astype(np.float16) for x in (q, k, v)), scale=128**-0.5)
    assert rows["fp32"]["rmse"] == pytest.approx(metrics.rmse(out, ref), rel=1e-9)


def test_unknown_distribution_is_refused():
    with pytest.raises(ValueError, match="distribution"):
        accuracy.draw(Case("cauchy", 0, 1), (4,), np.random.default_rng(0))


def test_run_case_matches_a_direct_golden_call_and_shows_the_overflow():
    case = Case("uniform", 30, 0.5)
    rows = {r["precision"]: r for r in accuracy.run_case(case, 0, 7, TINY, ("fp16_fp32", "fp16", "pasa", "fp32"))}
    for p in ("fp16_fp32", "fp16"):
        assert rows[p]["overflow"] and rows[p]["nan_pct"] == 100.0 and math.isnan(rows[p]["rmse"])
    for p in ("pasa", "fp32"):
        assert not rows[p]["overflow"] and rows[p]["nan_pct"] == 0.0 and rows[p]["rmse"] < 1e-2
    # the row's number is the eq. 19 RMSE of the golden model on that case's draw
    rng = np.random.default_rng(accuracy.case_seed(7, case, 0))
    q, k, v = (accuracy.draw(case, TINY, rng) for _ in range(3))
    out, _ = golden.attention(q, k, v, precision="pasa", scale=128**-0.5)
    ref, _ = golden.reference(*(x.astype(np.float16) for x in (q, k, v)), scale=128**-0.5)
    assert rows["pasa"]["rmse"] == pytest.approx(metrics.rmse(out, ref), rel=1e-9)  # float64 BLAS last bits


def test_the_study_takes_a_head_dim_and_a_kv_block_for_every_allocation(tmp_path, monkeypatch):
    """--head-dim draws every hard case at that head dim, --block-kv runs every allocation (fp32 too) at that
    block: the rows are the golden model's on that draw at that block (which fp32_frame's result depends on),
    and the metadata records both."""
    case = Case("steps", 20, 1)  # a level per 128 keys, on which fp32_frame at 64 and 128 keys differ
    rows = {r["precision"]: r for r in accuracy.run_case(case, 0, 7, None, ("fp32", "fp32_frame"), s2=512, d=160,
                                                         block_kv=64)}
    q, k, v, call = accuracy.draw_hard(case, np.random.default_rng(accuracy.case_seed(7, case, 0)), s2=512, d=160)
    assert q.shape[-1] == k.shape[-1] == 160 and call["scale"] == 160 ** -0.5
    ref, _ = golden.reference(*(x.astype(np.float16) for x in (q, k, v)), **call)
    for p in ("fp32", "fp32_frame"):
        errs = {n: metrics.rmse(golden.attention(q, k, v, precision=p, block_kv=n, **call)[0], ref) for n in (64, 128)}
        assert rows[p]["rmse"] == pytest.approx(errs[64], rel=1e-9)
    assert errs[64] != errs[128]  # fp32_frame's: the block is part of its result here
    seen = {}
    monkeypatch.setattr(accuracy, "run_study", lambda **kw: seen.update(kw) or list(rows.values()))
    assert cli.main(["accuracy", "--hard-only", "--head-dim", "160", "--block-kv", "64", "--block-q", "96",
                     "--precisions", "fp32", "fp32_frame", "--no-plots", "--no-progress", "--out", str(tmp_path)]) == 0
    assert seen["head_dim"] == 160 and seen["block_kv"] == 64 and seen["block_q"] == 96
    meta = json.loads((tmp_path / "results.json").read_text())["metadata"]
    assert meta["hard_head_dim"] == 160 and meta["block_kv"] == 64 and meta["block_q"] == 96
    # the call that reproduces the run, not the path of whatever script ran it
    assert meta["command"] == ("python -m pasa_npu accuracy --hard-only --head-dim 160 --block-kv 64 --block-q 96 "
                               f"--precisions fp32 fp32_frame --no-plots --no-progress --out {tmp_path}")


def test_every_allocation_of_a_case_runs_at_the_studys_query_tile(monkeypatch):
    """--block-q reaches every allocation's golden call (it decides the KV blocks a tile visits under a band)."""
    tiles = []
    attention = golden.attention
    monkeypatch.setattr(golden, "attention", lambda *a, **kw: tiles.append(kw["block_q"]) or attention(*a, **kw))
    rows = accuracy.run_case(Case("causal", 10, 1), 0, 7, None, ("fp32", "fp32_frame"), s1=64, s2=256, block_q=32)
    assert tiles == [32, 32] and len(rows) == 2


def test_a_scale_the_shifted_allocations_refuse_leaves_them_out_of_the_draw():
    """The hard sweep's scale 1e6 lies outside the FP16 shifting matrix's range: pasa and pasa_fp32 refuse it (as
    fused_attention does), so the study (the quick start's main job) has no row for them there instead of
    stopping; the others are computed."""
    rows = accuracy.run_case(Case("scale_ties", 1e6, 1), 0, 7, TINY, ("fp32", "pasa", "pasa_fp32", "fp32_frame"))
    assert [r["precision"] for r in rows] == ["fp32", "fp32_frame"]
    assert all(r["rmse"] < 1e-2 for r in rows)
    assert accuracy.format_results(rows, ("fp32", "pasa")).splitlines()[1].split()[-1] == "refused"
    rows = accuracy.run_case(Case("scale_ties", 20000, 1), 0, 7, TINY, ("fp32", "pasa"))
    assert [r["precision"] for r in rows] == ["fp32", "pasa"]


def test_study_is_reproducible_and_independent_of_jobs():
    kw = dict(shape=(1, 1, 16, 128), seed=3, precisions=("fp16_fp32", "pasa"), table4_seeds=2, hard_seeds=0,
              progress=False)
    a = accuracy.run_study(jobs=1, **kw)
    b = accuracy.run_study(jobs=2, **kw)
    # the same draws and FP16 outputs; the float64 reference may differ in its last bits with the
    # number of BLAS threads (one per spawned worker), and with it the RMSE's last digits
    exact = lambda rows: [{key: val for key, val in r.items() if key not in ("rmse", "max_abs_err", "lse_err")}
                          for r in rows]
    assert exact(a) == exact(b)
    np.testing.assert_allclose([r["rmse"] for r in a], [r["rmse"] for r in b], rtol=1e-9)
    cases = {(r["dist"], r["x0"], r["am"]) for r in a}
    assert len(cases) == len(set(c for cs in accuracy.sweeps(False).values() for c in cs))
    for c in accuracy.TABLE4:  # every Table 4 case is drawn table4_seeds times
        assert sum(1 for r in a if (r["dist"], r["x0"], r["am"]) == (c.dist, c.x0, c.am)
                   and r["precision"] == "fp16_fp32") == 2
    c = accuracy.run_study(jobs=1, **{**kw, "seed": 4})
    assert [r["rmse"] for r in c] != [r["rmse"] for r in a]


def _row(case, p, nan, rmse=1e-3, seed=0, lse_err=1e-4, zero_rows=0, recomputed=None):
    return {"dist": case.dist, "x0": case.x0, "am": case.am, "seed": seed, "precision": p, "rmse": rmse,
            "nan_pct": nan, "overflow": nan > 0, "max_abs_err": 0.0, "lse_err": lse_err, "zero_rows": zero_rows,
            "recomputed": recomputed, "reshifted": recomputed, "moved": None}


def test_table4_noise_criterion():
    c1, c2, c3 = Case("uniform", 20, 15), Case("uniform", 20, 20), Case("uniform", 30, 0.5)
    rows = [_row(c1, "fp16_fp32", x, seed=i) for i, x in enumerate([0.10, 0.15, 0.12])]  # paper 0.12
    rows += [_row(c2, "fp16_fp32", x, seed=i) for i, x in enumerate([4.0, 4.1, 3.9])]  # paper 8.14: far off
    rows += [_row(c3, "fp16_fp32", x, seed=i) for i, x in enumerate([100.0, 99.0])]  # paper 100: all must be
    rows += [_row(c1, "pasa", 0.0)]
    t4 = {(r["x0"], r["am"]): r for r in accuracy.table4(rows)}
    assert t4[20, 15]["within_noise"] and t4[20, 15]["draws"] == 3 and t4[20, 15]["pasa_nan_pct_max"] == 0.0
    assert not t4[20, 20]["within_noise"]
    assert not t4[30, 0.5]["within_noise"]
    assert t4[20, 15]["fp16_fp32_nan_pct_mean"] == pytest.approx(np.mean([0.10, 0.15, 0.12]))


def test_claim_counts_nonzero_mean_cases_without_fa_overflow():
    cs = [Case("uniform", 0, 0.5), Case("uniform", 10, 0.5), Case("uniform", 20, 0.5), Case("uniform", 30, 0.5)]
    rows = [_row(cs[0], "fp16_fp32", 0, 1e-3), _row(cs[0], "pasa", 0, 2e-3), _row(cs[0], "pasa_fp32", 0, 5e-4),
            _row(cs[1], "fp16_fp32", 0, 1e-3), _row(cs[1], "pasa", 0, 2e-3), _row(cs[1], "pasa_fp32", 0, 5e-4),
            _row(cs[2], "fp16_fp32", 0, 4e-3), _row(cs[2], "pasa", 0, 2e-3), _row(cs[2], "pasa_fp32", 0, 5e-4),
            _row(cs[3], "fp16_fp32", 100, float("nan")), _row(cs[3], "pasa", 0, 2e-3),
            _row(cs[3], "pasa_fp32", 0, 5e-4)]
    ours = Case("biased", 10, 1)  # not one of the paper's cases: not counted
    rows += [_row(ours, "fp16_fp32", 0, 1e-3), _row(ours, "pasa", 0, 1e-4), _row(ours, "pasa_fp32", 0, 1e-4)]
    assert accuracy.claim(rows) == {"pasa": (1, 2), "pasa_fp32": (2, 2)}


def test_outputs_hold_every_row(tmp_path):
    rows = accuracy.run_study(shape=(1, 1, 16, 128), precisions=("fp16_fp32", "pasa"), table4_seeds=2, hard_seeds=0,
                              jobs=1, progress=False)
    summary = accuracy.write_outputs(rows, tmp_path, full=False, shape=(1, 1, 16, 128), seed=0,
                                     precisions=("fp16_fp32", "pasa"))
    with open(tmp_path / "results.csv") as f:
        csv_rows = list(csv.DictReader(f))
    assert len(csv_rows) == len(rows)
    assert float(csv_rows[0]["rmse"]) == pytest.approx(rows[0]["rmse"]) or math.isnan(rows[0]["rmse"])
    # strict JSON: fp16_fp32 overflows (NaN RMSE) on several cases, written as null
    data = json.loads((tmp_path / "results.json").read_text(), parse_constant=lambda c: pytest.fail(f"bare {c}"))
    assert any(r["rmse"] is None and r["overflow"] for r in data["results"])
    assert data["metadata"]["shape"] == [1, 1, 16, 128] and len(data["results"]) == len(rows)
    assert data["table4"] == summary["table4"] and len(data["table4"]) == len(accuracy.TABLE4)
    assert (tmp_path / "table4.csv").read_text().count("\n") == len(accuracy.TABLE4) + 1
    assert (tmp_path / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_beta_prints_table3(capsys):
    assert cli.main(["beta"]) == 0
    out = capsys.readouterr().out
    for value in ("0.937500", "0.968994", "0.984497", "0.990311", "0.999031"):  # the paper's Table 3
        assert value in out


def test_cli_beta_scaled_and_bfloat16(capsys):
    assert cli.main(["beta", "--head-dim", "128", "--block-kv", "64"]) == 0
    out = capsys.readouterr().out
    assert "1/sqrt(128)" in out and "n = 64" in out
    assert f"{beta.optimal_beta(1 - 2**-6, 64, 'float16', 128**-0.5):.6f}" in out
    assert cli.main(["beta", "--dtype", "bfloat16"]) == 0
    out = capsys.readouterr().out  # start 0.999 rounds to a singular M in bfloat16: said so, not a NaN row
    assert "nan" not in out.lower()
    row = next(line for line in out.splitlines() if line.strip().startswith("0.999000"))
    assert row.split()[2:] == ["singular"] * 6 and "singular: M rounded to this dtype is singular" in out


@pytest.mark.parametrize("argv", [["beta", "--block-kv", "0"], ["beta", "--dtype", "float8"],
                                  ["accuracy", "--precisions", "fp64"], ["accuracy", "--shape", "1", "2"],
                                  ["accuracy", "--hard-seeds", "-1"], ["accuracy", "--seed", "-1"],
                                  ["accuracy", "--seed", "x"], ["nothing"]])
def test_cli_rejects_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    named = [a for a in argv[1:] if a.startswith("--")]  # the option at fault is named
    assert "error" in err and all(a in err for a in named), err


def test_cli_accuracy_end_to_end(tmp_path, capsys):
    out_dir = tmp_path / "acc"
    assert cli.main(["accuracy", "--shape", "1", "1", "16", "128", "--out", str(out_dir), "--jobs", "1",
                     "--no-plots", "--no-progress", "--precisions", "fp16_fp32", "pasa", "--hard-seeds", "0"]) == 0
    out = capsys.readouterr().out
    assert "Table 4" in out and "pasa: holds on" in out
    assert f"wrote results.csv, results.json, table4.csv in {out_dir} in" in out
    assert (out_dir / "results.csv").exists() and not (out_dir / "accuracy.png").exists()
    meta = json.loads((out_dir / "results.json").read_text())["metadata"]
    assert meta["pasa_npu"] == pasa_npu.__version__ and meta["commit"] == accuracy.source_commit()
    assert meta["commit"] is None or len(meta["commit"].removesuffix("-dirty")) == 40


def test_cli_accuracy_says_what_it_wrote_and_prints_no_empty_section(tmp_path, capsys):
    """pasa_rs alone: no Table 4 (fp16_fp32's NaN %) and no paper claim (PASA against fp16_fp32), so neither
    a section for them nor a table4.csv is announced."""
    out_dir = tmp_path / "acc"
    assert cli.main(["accuracy", "--shape", "1", "1", "16", "64", "--out", str(out_dir), "--jobs", "1",
                     "--no-plots", "--no-progress", "--precisions", "pasa_rs", "--hard-seeds", "0"]) == 0
    out = capsys.readouterr().out
    assert "Table 4" not in out and "claim" not in out
    assert f"wrote results.csv, results.json in {out_dir} in" in out
    assert sorted(p.name for p in out_dir.iterdir()) == ["results.csv", "results.json"]


def test_hard_draws_build_the_stated_inputs():
    rng = np.random.default_rng(0)
    shapes = {}
    for case in accuracy.HARD_CASES:
        q, k, v, call = accuracy.draw_hard(case, rng)
        band, scale = call["band"], call["scale"]
        shapes[case.dist] = (q.shape, k.shape, band)
        large = case.dist.startswith("scale")
        assert v.shape == k.shape and scale == pytest.approx(case.x0 if large else q.shape[-1] ** -0.5)
        assert (call["mask"] is None) == (case.dist != "padding")
        assert (call["sink"] is None) == (case.dist != "learnable_sink")
        assert np.isfinite(np.stack([q.astype(np.float16).max(), k.astype(np.float16).max()])).all()
        s = np.einsum("bhid,bhjd->bhij", q[:, : k.shape[1]], k) * scale  # the scaled scores
        if case.dist == "resonance":  # Q·Kᵀ near ±75 000 by phase, in FP16 range scaled
            assert 6.0e4 < abs(np.median(s / scale)) < 9.0e4 and np.sign(np.median(s)) == (1 if case.x0 == 0 else -1)
        if case.dist == "shift_overflow":  # block means ≈ −39 000, one key per block ≈ +40 000
            assert abs(np.median(s) + 39000) < 500 and abs(s[..., 0].mean() - 40000) < 500
        if case.dist == "spike":  # block 1 at −60 000 with one key at +60 000, then +61 000
            assert abs(np.median(s[..., :128]) + 60000) < 500 and abs(s[..., 5].mean() - 60000) < 500
            assert abs(s[..., 128:].mean() - 61000) < 100
        if case.dist in ("spread", "long_spread"):
            assert 4.5e4 < np.abs(s).max() < 6.6e4
        if case.dist == "long_fall":  # scaled scores fall from 0 to −x0 along the keys
            start, end = s[..., :1000].mean(), s[..., -1000:].mean()
            assert abs(start) < 0.5 and abs(end + case.x0) < 0.5
        if case.dist == "learnable_sink":  # one logit per head near x0
            assert call["sink"].shape == (q.shape[1],) and np.abs(call["sink"] - case.x0).max() <= 2
        if case.dist == "padding":  # batch 0 padded at the end, batch 1 at the start
            kept = ~call["mask"][:, 0, 0]
            assert kept[0, :613].all() and not kept[0, 613:].any()
            assert not kept[1, :387].any() and kept[1, 387:].all()
    assert shapes["long"][1][2] >= 128 * 1024 and shapes["long"][0][2] <= 4
    assert shapes["long_fall"][:2] == shapes["long"][:2] and shapes["long_spread"][1][2] >= 8192
    assert shapes["decode"][0][2] == 1 and shapes["gqa"][0][1] == 4 * shapes["gqa"][1][1]
    assert shapes["tail"][1][2] % 128 and shapes["d80"][0][3] == 80 and shapes["d256"][0][3] == 256
    assert shapes["causal"][:2] == shapes["band"][:2] and shapes["causal"][0][2] == 256
    assert shapes["causal"][2] == (None, 1000 - 256) and shapes["band"][2] == (1000 - 256 - 255, 1000 - 256)
    assert all(b is None for dist, (_, _, b) in shapes.items() if dist not in ("causal", "band"))
    with pytest.raises(ValueError, match="hard case"):
        accuracy.draw_hard(Case("nothing", 0, 0), rng)


def test_summary_ratios_failures_and_lse():
    cs = [Case("resonance", 0, 34), Case("drift", 10, 1), Case("spread", 0, 60000)]
    rows = []
    for seed in range(2):
        for i, c in enumerate(cs):
            rows.append(_row(c, "fp32", 0, 1e-4, seed, lse_err=1e-5))
            rows.append(_row(c, "pasa_rs", 0, (1 + i + seed) * 1e-4, seed, lse_err=2e-3 if i == 2 else 1e-4,
                             recomputed=0.1 * i))
            rows.append(_row(c, "fp16_fp32", 100.0 if i == 0 else 0, float("nan") if i == 0 else 3e-4, seed,
                             zero_rows=1 if (i, seed) == (1, 1) else 0))
    summ = accuracy.summary(rows, ("fp32", "pasa_rs", "fp16_fp32"))
    # no paper or biased case among the rows; a group per hard case
    assert set(summ["pasa_rs"]) == {"all", "hard", "resonance", "drift", "spread"}
    rs = summ["pasa_rs"]["hard"]
    assert rs["draws"] == 6 and rs["failures"] == 0
    assert rs["median_ratio"] == pytest.approx(2.5) and rs["worst_ratio"] == pytest.approx(4.0)
    assert rs["worst_case"] == "spread x0=0 am=60000 seed=1"
    assert rs["lse_within"] == 4 and rs["worst_lse_over_bound"] == pytest.approx(2.0)  # 2e-3 over max(1e-4, 1e-3)
    assert rs["recomputed_min"] == 0.0 and rs["recomputed_max"] == pytest.approx(0.2)
    fa = summ["fp16_fp32"]["all"]
    assert fa["failures"] == 3 and fa["worst_ratio"] == pytest.approx(3.0) and "recomputed_min" not in fa
    assert summ["fp32"]["all"]["median_ratio"] == 1.0
    text = accuracy.format_summary(summ)
    assert "pasa_rs" in text and "spread x0=0 am=60000 seed=1" in text
    assert {line.split()[1] for line in text.splitlines()[1:]} == {"all", "hard"}
    sp = summ["pasa_rs"]["spread"]
    assert sp["draws"] == 2 and sp["median_ratio"] == pytest.approx(3.5) and sp["worst_ratio"] == pytest.approx(4.0)
    assert "| spread | 2 | 3.500 / 4.000, 0, 0/2 |" in accuracy.format_classes(summ)


def test_summary_ratio_where_fp32_is_exact():
    """At a large scale every row's weight may sit on one key, whose value fp32 returns exactly: a ratio
    is then 1 where the allocation is exact too and Inf where it is not."""
    c = Case("scale_ties", 20000, 1)
    rows = [_row(c, "fp32", 0, 0.0), _row(c, "fp32_frame", 0, 0.0), _row(c, "pasa_rs", 0, 1e-4)]
    summ = accuracy.summary(rows, ("fp32", "fp32_frame", "pasa_rs"))
    assert summ["fp32_frame"]["scale_ties"]["worst_ratio"] == 1.0
    assert summ["pasa_rs"]["scale_ties"]["worst_ratio"] == math.inf


def test_plot_has_a_hard_panel_and_json_is_strict(tmp_path):
    c = Case("uniform", 30, 0.5)
    rows = [_row(Case(cc.dist, cc.x0, cc.am), p, 0, 1e-3) for cs in accuracy.sweeps(False).values() for cc in cs
            for p in ("fp32", "fp16_fp32")]
    rows = [r if (r["dist"], r["x0"], r["precision"]) != (c.dist, c.x0, "fp16_fp32") else
            _row(c, "fp16_fp32", 0.03, float("nan")) for r in rows]
    rows += [_row(h, p, 0, 1e-3, s, lse_err=float("inf") if p == "fp16_fp32" else 1e-4)
             for h in accuracy.HARD_CASES[:3] for s in range(2) for p in ("fp32", "fp16_fp32")]
    accuracy.write_outputs(rows, tmp_path, full=False, shape=(1, 1, 16, 128), seed=0,
                           precisions=("fp32", "fp16_fp32"))
    data = json.loads((tmp_path / "results.json").read_text(), parse_constant=lambda x: pytest.fail(f"bare {x}"))
    assert data["metadata"]["hard_seeds"] == 2
    assert any(r["lse_err"] == "inf" for r in data["results"]) and any(r["rmse"] is None for r in data["results"])
    assert data["summary"]["fp16_fp32"]["hard"]["draws"] == 6
    assert (tmp_path / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_hard_only_plot_with_an_exact_fp32(tmp_path):
    """The hard sweep alone (no paper panels), with a draw where fp32's error is 0 (a large scale)."""
    c = Case("scale_ties", 20000, 1)
    rows = [_row(c, "fp32", 0, 0.0), _row(c, "fp32_frame", 0, 1e-4)]
    rows += [_row(h, p, 0, 1e-3) for h in accuracy.HARD_CASES[:2] for p in ("fp32", "fp32_frame")]
    accuracy.write_outputs(rows, tmp_path, full=False, shape=(1, 1, 16, 128), seed=0, precisions=("fp32", "fp32_frame"))
    assert (tmp_path / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((tmp_path / "results.json").read_text())["summary"]
    assert summary["fp32_frame"]["scale_ties"]["worst_ratio"] == "inf"

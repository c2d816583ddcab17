"""The paper's experiments (experiments): metrics against direct computations, the result
datasets' layout, the report's claim checks, and the quick runs through `jdl reproduce`."""
import numpy as np
import pytest
import xarray as xr

from jdl.cli import main
from jdlcore import CME, JDL, GaussianKernel
from experiments.metrics import negative_share, psd_failure
from experiments.report import claims, structural_checks
from experiments.runner import Cell, load, plan, to_datasets

from .conftest import bivariate_gaussian


def test_psd_failure_counts_matrices_with_a_negative_eigenvalue():
    good = np.array([[2.0, 1.0], [1.0, 2.0]])
    bad = np.array([[1.0, 2.0], [2.0, 1.0]])  # eigenvalues 3 and -1
    rounding = np.array([[1.0, 1.0], [1.0, 1.0 - 1e-15]])  # singular up to rounding: PSD
    assert psd_failure(np.stack([good, bad, rounding, bad])) == 0.5


def test_negative_share_counts_negative_weights_of_cme_and_jdl():
    """The share of entries below -1e-12, counted one by one: CME weights (small lengthscale, so some
    are negative), and the JDL signed law's Radon-Nikodym values at every training atom."""
    X, Y = bivariate_gaussian(500)
    Xq = np.linspace(-3, 3, 25)[:, None]

    def counted(values):
        flat = np.asarray(values).ravel()
        return sum(1 for value in flat if value < -1e-12) / flat.size

    cme = CME(GaussianKernel(0.3), GaussianKernel(0.3), reg=1e-8).fit(X, Y)
    expected = counted(cme.conditional_weights(Xq))
    assert expected > 0.05 and negative_share(cme, Xq) == pytest.approx(expected, rel=1e-12)
    jdl = JDL(GaussianKernel(0.3), GaussianKernel(0.2), reg=1e-6, constraints="normalization").fit(X, Y)
    expected = counted(jdl.radon_nikodym(Xq))
    assert expected > 0.001 and negative_share(jdl, Xq) == pytest.approx(expected, rel=1e-12)


def _fake(kind, part, d, n, replicate, losses, psd=0.0, normalization=0.0):
    result = {method: {"loss": loss, "normalization_error": normalization, "negative_share": 0.0, "fit_time": 1.0,
                       "psd_failure": psd if method in ("jdl", "cme") else 0.0, "query_time": 0.1}
              for method, loss in losses.items()}
    if "jdl_grid" in result:
        result["jdl_grid"].update(grid_minimum=0.5, grid_train_psd_failure=0.0)
    result["_meta"] = {"cell_seconds": 2.0}
    return Cell(kind, part, d, n, replicate), result


def test_datasets_have_the_issue_layout_and_claims_count_cells():
    losses = {"jpdl": 0.1, "jdl": 0.2, "cme": 0.3, "jdl_tightening": 0.5, "jdl_grid": 0.4, "cme_constrained": 0.3}
    swapped = {**losses, "jpdl": 0.25}
    results = [_fake("moments", "gaussian", 1, 1000, r, losses) for r in range(2)]
    results += [_fake("moments", "gaussian", 2, 1000, r, swapped) for r in range(2)]
    results.append(_fake("moments", "gaussian", 2, 10_000, 0, losses, psd=0.02))
    datasets = to_datasets(results)
    ds = datasets[("moments", "gaussian")]
    assert ds["loss"].dims == ("method", "n", "d", "replicate")
    for name in ("loss", "normalization_error", "psd_failure", "negative_share", "fit_time", "query_time"):
        assert name in ds
    assert ds.sizes == {"method": 7, "n": 2, "d": 2, "replicate": 2}
    assert np.isnan(ds["loss"].sel({"method": "jdl", "n": 10_000, "d": 1})).all()  # a cell not run is NaN
    assert float(ds["grid_minimum"].sel({"method": "jdl_grid", "n": 1000, "d": 1, "replicate": 0})) == 0.5
    text = "\n".join(claims(datasets))
    assert "JPDL <= JDL <= CME in second-moment loss (Gaussian):** holds in 2 of 3 (n, d) cells" in text
    checks = structural_checks(datasets)
    assert all(holds for holds, _ in checks.values())
    broken = _fake("moments", "gaussian", 1, 10_000, 0, {"jdl_tightening": 0.1})
    broken[1]["jdl_tightening"]["psd_failure"] = 0.5
    results.append(broken)
    assert not structural_checks(to_datasets(results))[
        "JDL with the tightening (33): no non-PSD second-moment matrix at test x"][0]


def test_report_lists_replicates_times_and_ranks_per_n(tmp_path):
    from experiments.report import write_report

    results = []
    for n, count, rank in ((1000, 3, 40), (10_000, 1, 90)):
        for r in range(count):
            cell, result = _fake("moments", "cauchy", 1, n, r, {"jdl": 0.1})
            result["_meta"].update(rank_x=rank, rank_y=rank + 1, factor_error=1e-3 * (r + 1))
            results.append((cell, result))
    report = write_report(to_datasets(results), tmp_path / "r.md").read_text()
    assert "| 1,000 | 3 | 2.00 s | 6 s | 40 / 41 | 0.003 |" in report
    assert "| 10,000 | 1 | 2.00 s | 2 s | 90 / 91 | 0.001 |" in report


def test_plans():
    assert len(plan("moments", quick=True)) == 21 and len(plan("classification", quick=True)) == 4
    full = plan("moments")
    assert {c.n for c in full if c.part == "gaussian"} == {1_000, 10_000, 100_000, 1_000_000}
    assert {c.n for c in full if c.part == "cauchy"} == {1_000, 10_000, 100_000, 1_000_000}
    count = {n: len({c.replicate for c in full if c.n == n}) for n in (1_000, 10_000, 100_000, 1_000_000)}
    assert count == {1_000: 100, 10_000: 50, 100_000: 5, 1_000_000: 2}
    events = plan("classification")
    assert {n: len({c.replicate for c in events if c.n == n}) for n in (1_000, 3_000)} == {1_000: 100, 3_000: 20}
    assert max(c.n for c in plan("moments", max_n=100_000)) == 100_000
    with pytest.raises(ValueError, match="kind: unknown"):
        plan("regression")


def test_quick_moments_run_asserts_the_structural_claims(tmp_path, capsys):
    """The CI smoke run: JDL normalization below 1e-10, no non-PSD matrix from a positivity-constrained
    JDL, grid-positivity JDL non-negative on its training grid; datasets, figures and report written."""
    assert main(["reproduce", "moments", "--quick", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("PASS") == 10 and "FAIL" not in out
    assert "PASS  JDL with the tightening (33): 1 + h >= 0 on the training grid" in out
    datasets = load(tmp_path)
    assert set(datasets) == {("moments", "gaussian"), ("moments", "uniform"), ("moments", "cauchy")}
    gaussian = datasets[("moments", "gaussian")]
    jdl = gaussian.sel({"method": ["jdl", "jdl_tightening", "jdl_grid"]})
    assert float(jdl["normalization_error"].max(skipna=True)) < 1e-10
    for ds in datasets.values():
        assert float(ds["psd_failure"].sel({"method": ["jdl_tightening", "jdl_pointwise"]}).max(skipna=True)) == 0.0
        assert float(ds["negative_share"].sel({"method": "jdl_pointwise"}).max(skipna=True)) == 0.0
    for method in ("jdl_tightening", "jdl_pointwise", "jdl_grid"):  # the guarantees themselves, on the training grid
        assert float(gaussian["grid_minimum"].sel({"method": method}).min(skipna=True)) >= -1e-12
        assert float(gaussian["grid_train_psd_failure"].sel({"method": method}).max(skipna=True)) == 0.0
    assert np.isnan(gaussian["grid_minimum"].sel({"method": ["jdl", "cme", "jpdl"]})).all()
    assert np.isnan(datasets[("moments", "cauchy")]["loss"]).all()  # Cauchy has no second moments
    assert float(gaussian["normalization_error"].sel({"method": "cme"}).max()) > 1e-3  # the CME is not normalized
    report = (tmp_path / "results.md").read_text()
    assert "## Structural checks" in report and "## The paper's findings, checked" in report
    assert len(list((tmp_path / "results_figures").glob("*.png"))) >= 12
    assert xr.open_zarr(tmp_path / "moments-gaussian.zarr", consolidated=False)["loss"].dims == (
        "method", "n", "d", "replicate")


def test_quick_classification_run_on_real_returns(tmp_path, capsys):
    pytest.importorskip("skfolio")
    assert main(["reproduce", "classification", "--quick", "--out", str(tmp_path)]) == 0
    datasets = load(tmp_path)
    assert set(datasets) == {("classification", "0.01"), ("classification", "0.05")}
    events = datasets[("classification", "0.05")]
    assert events.sizes == {"method": 5, "n": 1, "d": 2, "replicate": 1}
    assert float(events["negative_share"].sel({"method": ["jdl_tightening", "klr"]}).max()) == 0.0
    assert np.isnan(events["normalization_error"].sel({"method": "klr"})).all()
    assert "Constrained JDL on par with KLR" in (tmp_path / "results.md").read_text()


def test_a_stopped_run_keeps_every_finished_cell(tmp_path, monkeypatch):
    from experiments import runner

    cells = [Cell("moments", "gaussian", 1, 1000, r) for r in range(3)]
    finished = {cell: _fake("moments", "gaussian", 1, 1000, cell.replicate, {"jdl": 0.1 * (cell.replicate + 1)})[1]
                for cell in cells[:2]}

    def run_cell(cell):
        if cell not in finished:
            raise KeyboardInterrupt  # the run is stopped during the third cell
        return finished[cell]

    monkeypatch.setattr(runner, "run_cell", run_cell)
    with pytest.raises(KeyboardInterrupt):
        runner.run_cells(cells, out=tmp_path)
    kept = load(tmp_path)[("moments", "gaussian")]
    assert kept["loss"].sel({"method": "jdl", "n": 1000, "d": 1}).values.tolist() == [0.1, 0.2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["moments-gaussian.nc", "moments-gaussian.zarr"]


def test_a_resumed_run_does_only_the_cells_not_yet_saved(tmp_path):
    from experiments.runner import pending, save

    cells = [Cell("moments", "gaussian", d, 1000, r) for d in (1, 2) for r in range(3)]
    assert pending(cells, tmp_path / "absent") == cells
    save(to_datasets([_fake("moments", "gaussian", 1, 1000, r, {"jdl": 0.1}) for r in (0, 2)]), tmp_path)
    assert pending(cells, tmp_path) == [Cell("moments", "gaussian", 1, 1000, 1)] + cells[3:]
    assert pending([Cell("classification", "0.01", 1, 1000, 0)], tmp_path) == [Cell("classification", "0.01", 1, 1000, 0)]


def test_an_interrupted_save_leaves_the_earlier_results_intact(tmp_path, monkeypatch):
    from experiments.runner import save

    save(to_datasets([_fake("moments", "gaussian", 1, 1000, 0, {"jdl": 0.2})]), tmp_path)

    def broken(self, *args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(xr.Dataset, "to_netcdf", broken)
    with pytest.raises(OSError, match="disk full"):
        save(to_datasets([_fake("moments", "gaussian", 1, 1000, 0, {"jdl": 0.7})]), tmp_path)
    monkeypatch.undo()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
    where = {"method": "jdl", "n": 1000, "d": 1, "replicate": 0}
    assert float(load(tmp_path)[("moments", "gaussian")]["loss"].sel(where)) == 0.2
    (tmp_path / "moments-gaussian.zarr").rename(tmp_path / "zarr-aside")  # the NetCDF copy is the old one too
    assert float(load(tmp_path)[("moments", "gaussian")]["loss"].sel(where)) == 0.2


def test_save_merges_new_cells_into_earlier_results(tmp_path):
    from experiments.runner import save

    losses = {"jdl": 0.2, "cme": 0.3}
    save(to_datasets([_fake("moments", "gaussian", 1, 1000, 0, losses)]), tmp_path)
    save(to_datasets([_fake("moments", "gaussian", 1, 10_000, 0, {"jdl": 0.1})]), tmp_path)
    merged = load(tmp_path)[("moments", "gaussian")]
    assert list(merged.n.values) == [1000, 10_000]
    assert float(merged["loss"].sel({"method": "cme", "n": 1000, "d": 1, "replicate": 0})) == 0.3
    assert float(merged["loss"].sel({"method": "jdl", "n": 10_000, "d": 1, "replicate": 0})) == 0.1
    assert xr.open_dataset(tmp_path / "moments-gaussian.nc", engine="scipy")["loss"].dims == (
        "method", "n", "d", "replicate")
    assert len(plan("moments", max_n=10_000_000, min_n=10_000_000)) == 3  # the chunked 1e7 point, one each d
    import shutil

    shutil.rmtree(tmp_path / "moments-gaussian.zarr")  # a clean checkout keeps the NetCDF copies only
    again = load(tmp_path)[("moments", "gaussian")]
    assert float(again["loss"].sel({"method": "cme", "n": 1000, "d": 1, "replicate": 0})) == 0.3
    assert list(again.method.values) == list(merged.method.values)


def test_plan_keeps_only_the_parts_asked_for():
    cauchy = plan("moments", parts=["cauchy"])
    assert cauchy and {cell.part for cell in cauchy} == {"cauchy"}
    assert {cell.part for cell in plan("classification", quick=True, parts=["0.05"])} == {"0.05"}
    with pytest.raises(ValueError, match="parts: unknown 'normal' for moments"):
        plan("moments", parts=["normal"])


def test_the_lengthscale_search_leaves_out_candidates_beyond_the_rank_budget(monkeypatch):
    from jdlcore import JDL, Factorisation, build_problem, median_heuristic, tuning
    from experiments import moments
    from experiments.data import CauchyCase

    rng = np.random.default_rng(3)
    X, Y = CauchyCase.random(2, rng).sample(1500, rng)
    train, validation = (X[:1200], Y[:1200]), (X[1200:], Y[1200:])
    scale_x, scale_y = median_heuristic(train[0]), median_heuristic(train[1])
    narrow = build_problem(*train, GaussianKernel(0.25 * scale_x), GaussianKernel(0.25 * scale_y),
                           Factorisation(tol=1e-3))
    wide = build_problem(*train, GaussianKernel(8 * scale_x), GaussianKernel(8 * scale_y), Factorisation(tol=1e-3))
    budget = max(wide.basis_x.size, wide.basis_y.size)
    assert min(narrow.basis_x.size, narrow.basis_y.size) > budget  # heavy tails: many more pivots when narrow
    evaluated = []

    class Recording(JDL):
        def fit_problem(self, problem, Y):
            evaluated.append((self.kernel_x.lengthscale / scale_x, self.kernel_y.lengthscale / scale_y))
            return super().fit_problem(problem, Y)

    monkeypatch.setattr(tuning.grid, "JDL", Recording)  # the candidates of jdl's grid search (score_grid)
    search = dict(lengthscale_factors=(0.25, 8.0), regs=(1e-6,))
    moments._choose_lengthscales(train, validation, moments.MomentSettings(**search), 1e-3, (1200, 300))
    assert sorted(set(np.round(evaluated, 6).ravel())) == [0.25, 8.0]  # without a budget: every candidate
    evaluated.clear()
    settings = moments.MomentSettings(**search, max_rank=budget)
    kernel_x, kernel_y = moments._choose_lengthscales(train, validation, settings, 1e-3, (1200, 300))
    assert np.allclose(evaluated, 8.0)  # only the wide pair fits the budget
    assert (kernel_x.lengthscale, kernel_y.lengthscale) == pytest.approx((8 * scale_x, 8 * scale_y))
    evaluated.clear()
    tight = moments.MomentSettings(**search, max_rank=budget // 2)  # none fits: the widest, unevaluated
    kernel_x, kernel_y = moments._choose_lengthscales(train, validation, tight, 1e-3, (1200, 300))
    assert not evaluated and kernel_x.lengthscale == pytest.approx(8 * scale_x)

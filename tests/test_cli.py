import json
import subprocess
import textwrap
import sys

import numpy as np
import pytest

from jdl.cli import main


def test_demo_runs_the_flows_and_reports_against_the_truth(tmp_path, capsys):
    """The demo at a small size, as README line 1 runs it: every stage on one embedded Dask cluster,
    in this process (no Prefect API configured: no server), leaving dask's configuration as it was
    (a step that did not asked the next for a Dask client that was gone)."""
    import dask

    before = dask.config.get("scheduler", None)
    argv = ["demo", "--rows", "2000", "--workdir", str(tmp_path / "demo")]
    assert main(argv) == 0
    assert dask.config.get("scheduler", None) == before
    out = capsys.readouterr().out
    from pipeline.tuning import load_tuning

    scored = int(np.isfinite(load_tuning(tmp_path / "demo" / "tuning.zarr")["seconds"].values).sum())
    assert "n = 2,000 rows" in out and f"best of {scored} on 2,000 rows" in out and 0 < scored < 3 * 3 * 8
    rmse = float(out.split("conditional mean ")[1].split(",")[0])
    assert rmse < 0.15
    sd = float(out.split("conditional sd ")[1].split(",")[0])
    assert sd < 0.25
    for name in ("data.zarr", "tuning.zarr", "model.zarr", "scores.zarr", "batch.zarr"):
        assert (tmp_path / "demo" / name).is_dir()
    assert main(argv) == 0  # a second run reuses every stage
    assert "(reused: stage, stage_batch, tune, fit, score)" in capsys.readouterr().out


def test_errors_are_one_line_with_nonzero_exit(tmp_path):
    result = subprocess.run([sys.executable, "-m", "jdl.cli", "demo", "--rows", "5"], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["jdl demo: error: rows: the demo needs at least 100 rows, got 5"]
    result = subprocess.run([sys.executable, "-m", "jdl.cli", "fit", str(tmp_path / "d.zarr"), "--out",
                             str(tmp_path / "m.zarr"), "--tol", "3"], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "jdl fit: error: fit: parameter tol: must be in [0, 1) (got 3.0)"]
    helps = textwrap.dedent("""
        import contextlib, io, sys
        from jdl.cli import main
        for command in sys.argv[1:]:
            shown = io.StringIO()
            with contextlib.redirect_stdout(shown):
                try:
                    main([*command.split(), "--help"])
                except SystemExit as stop:
                    print(command, stop.code, "usage: jdl" in shown.getvalue(), sep=":", file=sys.stderr)
    """)
    commands = ["", "stage", "tune", "fit", "score", "evaluate", "inspect", "versions", "serve", "demo", "compress",
                "reproduce"]
    result = subprocess.run([sys.executable, "-c", helps, *commands], capture_output=True, text=True)
    assert result.stderr.splitlines() == [f"{command}:0:True" for command in commands], result.stderr[-2000:]


def test_stage_tune_fit_inspect_through_the_cli(tmp_path, capsys):
    rng = np.random.default_rng(3)
    x = rng.uniform(-2, 2, 900)
    np.savez(tmp_path / "t.npz", a=x, b=np.sin(2 * x) + 0.2 * rng.standard_normal(900))
    assert main(["stage", str(tmp_path / "t.npz"), "--x", "a", "--y", "b", "--out", str(tmp_path / "d.zarr")]) == 0
    assert "staged 900 rows" in capsys.readouterr().out
    assert main(["tune", str(tmp_path / "d.zarr"), "--out", str(tmp_path / "t.zarr"), "--lengthscales-x", "0.2,0.5",
                 "--lengthscales-y", "0.3", "--regs", "1e-5,1e-3", "--scheduler", "memory"]) == 0
    assert "tuned 4 candidates on 900 rows" in capsys.readouterr().out
    assert main(["fit", str(tmp_path / "d.zarr"), "--out", str(tmp_path / "m.zarr"), "--tuning",
                 str(tmp_path / "t.zarr"), "--scheduler", "memory"]) == 0
    fitted = capsys.readouterr().out
    assert "fitted jdl on n = 900" in fitted and "reused" not in fitted
    assert main(["fit", str(tmp_path / "d.zarr"), "--out", str(tmp_path / "m.zarr"), "--tuning",
                 str(tmp_path / "t.zarr"), "--scheduler", "memory"]) == 0
    assert "(reused: inputs unchanged)" in capsys.readouterr().out
    assert main(["inspect", str(tmp_path / "m.zarr"), "--plots", str(tmp_path / "plots")]) == 0
    card = capsys.readouterr().out
    from pipeline.model_store import load_model

    model = load_model(tmp_path / "m.zarr")
    assert model.provenance_["data_fingerprint"] in card
    best = json.loads(json.dumps(model.provenance_["tuning"]["best"]))
    assert best["reg"] == model.reg
    for name in ("residual_trace.png", "conditional_density.png", "validation_surface.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:4] == b"\x89PNG"
    assert main(["inspect", str(tmp_path / "d.zarr")]) == 2
    assert "not a jdl model store" in capsys.readouterr().err


def test_positivity_and_support_size_are_checked_in_one_line_and_nothing_is_written(tmp_path, capsys):
    """Bad positivity settings fail before any work with one line naming the parameter and the rule,
    and leave no output store."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal(300)
    np.savez(tmp_path / "t.npz", a=x, b=x + 0.3 * rng.standard_normal(300))
    assert main(["stage", str(tmp_path / "t.npz"), "--x", "a", "--y", "b", "--out", str(tmp_path / "d.zarr")]) == 0
    capsys.readouterr()
    base = ["fit", str(tmp_path / "d.zarr"), "--out", str(tmp_path / "m.zarr"), "--lengthscale-x", "0.5",
            "--lengthscale-y", "0.5", "--reg", "1e-4", "--scheduler", "memory"]
    cases = [
        (["--support-size", "0"], "parameter support_size: must be an integer >= 1 or None (got 0)"),
        (["--support-size", "301"], "support_size: 301 is more than the 300 rows of"),
        (["--positivity", "magic"], "parameter positivity: Input should be 'auto', 'project', 'clip'"),
        (["--positivity", "sos"], "parameter positivity: 'sos' is not a choice of method jdl; must be one of"),
        (["--reg", "0"], "parameter reg: must be > 0 with constraints='positivity'"),
        (["--reg", "-1", "--constraints", "none"], "parameter reg: must be finite and >= 0 (got -1.0)"),
    ]
    for extra, message in cases:
        assert main(base + extra) == 2, extra
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (extra, err)
        assert not (tmp_path / "m.zarr").exists() and not list(tmp_path.glob(".m.zarr*")), extra
    assert main(base + ["--support-size", "64"]) == 0
    from pipeline.model_store import load_model

    model = load_model(tmp_path / "m.zarr")
    assert model.support_.requested == 64 and model.support_.size <= 64
    assert model.conditional_weights(x[:20, None]).min() >= 0

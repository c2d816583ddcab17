"""Staging round trips for every source format, and the bad-input matrix (message and no store)."""
import numpy as np
import pytest

pd = pytest.importorskip("pandas")
xr = pytest.importorskip("xarray")
pytest.importorskip("zarr")
from pipeline.staging import open_staged, stage  # noqa: E402


@pytest.fixture
def table(rng):
    n = 1003
    return pd.DataFrame({"a": rng.standard_normal(n), "b": rng.uniform(size=n), "t": rng.standard_normal(n)})


def write(table, path):
    suffix = path.suffix
    if suffix == ".csv":
        table.to_csv(path, index=False)
    elif suffix == ".parquet":
        table.to_parquet(path)
    elif suffix == ".npy":
        np.save(path, table.to_numpy())
    elif suffix == ".npz":
        np.savez(path, **{c: table[c].to_numpy() for c in table.columns})
    elif suffix == ".nc":
        xr.Dataset({c: ("row", table[c].to_numpy()) for c in table.columns}).to_netcdf(path, engine="scipy")
    elif suffix == ".zarr":
        xr.Dataset({c: ("row", table[c].to_numpy()) for c in table.columns}).to_zarr(path, zarr_format=3, consolidated=False)
    return path


@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".npy", ".npz", ".nc", ".zarr"])
def test_round_trip_every_format(table, tmp_path, suffix):
    source = write(table, tmp_path / f"source{suffix}")
    x, y = (["0", "1"], ["2"]) if suffix == ".npy" else (["a", "b"], ["t"])
    out = stage(source, tmp_path / "data.zarr", x, y, chunk_size=200)
    group = open_staged(out)
    np.testing.assert_array_equal(group["x"][:], table[["a", "b"]].to_numpy())
    np.testing.assert_array_equal(group["y"][:], table[["t"]].to_numpy())
    assert group["x"].chunks == (200, 2)
    assert group.attrs["x_features"] == x and group.attrs["n_samples"] == 1003
    ds = xr.open_zarr(out, consolidated=False)
    assert ds["x"].dims == ("sample", "x_feature")


@pytest.mark.parametrize(
    "mutate, x, y, message",
    [
        (lambda t: t.assign(a=t["a"].where(t.index != 500, -np.inf)), ["a"], ["t"], r"x column 'a': -inf at row 500"),
        (lambda t: t.assign(t=t["t"].where(t.index != 7, np.inf)), ["a"], ["t"], r"y column 't': inf at row 7"),
        (lambda t: t, ["a", "missing"], ["t"], r"column 'missing': not in source.csv"),
        (lambda t: t.assign(a=t["a"].astype(object).where(t.index != 3, "oops")), ["a"], ["t"], r"x column 'a': non-numeric value 'oops' at row 3"),
        (lambda t: t.iloc[:0], ["a"], ["t"], r"has 0 row\(s\)"),
        (lambda t: t.iloc[:1], ["a"], ["t"], r"has 1 row\(s\)"),
        (lambda t: t.assign(b=2.5), ["b"], ["t"], r"x column 'b': is constant"),
        (lambda t: t, ["a"], ["a"], r"column 'a': is named for both x and y"),
        (lambda t: t, ["a", "b", "a"], ["t"], r"^x: column 'a' is named twice$"),
    ],
)
def test_bad_input_fails_clearly_and_leaves_no_store(table, tmp_path, mutate, x, y, message):
    source = write(mutate(table), tmp_path / "source.csv")
    with pytest.raises(ValueError, match=message):
        stage(source, tmp_path / "data.zarr", x, y, chunk_size=100)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["source.csv"]


def test_mismatched_lengths_and_existing_target(table, tmp_path):
    source = tmp_path / "s.npz"
    np.savez(source, a=np.arange(5.0), t=np.arange(4.0))
    with pytest.raises(ValueError, match="mismatched lengths"):
        stage(source, tmp_path / "d.zarr", ["a"], ["t"])
    good = write(table, tmp_path / "g.csv")
    stage(good, tmp_path / "d.zarr", ["a"], ["t"])
    with pytest.raises(ValueError, match="already exists"):
        stage(good, tmp_path / "d.zarr", ["a"], ["t"])
    text = good.rename(tmp_path / "g.txt")
    with pytest.raises(ValueError, match="unknown format '.txt'"):
        stage(text, tmp_path / "e.zarr", ["a"], ["t"])


def test_cli_stage(table, tmp_path, capsys):
    from jdl.cli import main

    source = write(table, tmp_path / "s.parquet")
    assert main(["stage", str(source), "--x", "a,b", "--y", "t", "--out", str(tmp_path / "d.zarr"), "--chunk-size", "300"]) == 0
    assert "staged 1,003 rows" in capsys.readouterr().out
    assert main(["stage", str(source), "--x", "a,zzz", "--y", "t", "--out", str(tmp_path / "e.zarr")]) == 2
    # one error line, no traceback
    assert "jdl stage: error: column 'zzz': not in s.parquet (has a, b, t)" in capsys.readouterr().err.splitlines()
    assert not (tmp_path / "e.zarr").exists()


def test_recorded_fingerprint_equals_the_recomputed_one(table, tmp_path):
    import hashlib

    import zarr

    from pipeline.staging import data_fingerprint

    stage(write(table, tmp_path / "s.parquet"), tmp_path / "d.zarr", ["a", "b"], ["t"], chunk_size=300)
    group = zarr.open_group(tmp_path / "d.zarr", mode="r+")
    recorded = group.attrs["fingerprint"]
    del group.attrs["fingerprint"]
    assert data_fingerprint(zarr.open_group(tmp_path / "d.zarr", mode="r")) == recorded
    digests = [hashlib.sha256(np.ascontiguousarray(group[role][:], dtype=np.float64).tobytes()).hexdigest()
               for role in ("x", "y")]  # whole arrays at once: independent of the chunking
    assert hashlib.sha256(f"{digests[0]}:{digests[1]}".encode()).hexdigest() == recorded


def test_a_missing_y_is_refused_with_a_count_or_dropped_if_asked(tmp_path, capsys):
    """Rows with a missing y: one error counting them and naming the first, nothing on disk; with
    --drop-missing-y they are left out, counted in the store, and an x error still names its source row."""
    import pandas as pd
    from jdl.cli import main
    from pipeline.staging import open_staged

    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"a": rng.standard_normal(900), "c": rng.choice(["u", "v"], 900),
                          "t": rng.standard_normal(900)})
    gaps = [5, 401, 402, 899]
    frame.loc[gaps, "t"] = np.nan
    frame.to_csv(tmp_path / "s.csv", index=False)  # a missing y is an empty cell in the CSV
    command = ["stage", str(tmp_path / "s.csv"), "--x", "a,c", "--y", "t", "--out", str(tmp_path / "d.zarr"),
               "--chunk-size", "200"]
    assert main(command) == 2
    assert capsys.readouterr().err.strip() == ("jdl stage: error: y: 4 row(s) have a missing value, the first at row 5; "
                                              "drop them with --drop-missing-y (drop_missing_y=True)")
    assert not (tmp_path / "d.zarr").exists()
    assert main(command + ["--drop-missing-y"]) == 0
    assert "staged 896 rows (4 rows with a missing y left out)" in capsys.readouterr().out
    group = open_staged(tmp_path / "d.zarr")
    assert group.attrs["dropped_missing_y"] == 4
    kept = frame.drop(index=gaps)
    np.testing.assert_array_equal(group["y"][:, 0], kept["t"].to_numpy())
    np.testing.assert_array_equal(group["x"][:, 0], kept["a"].to_numpy())
    frame.loc[600, "a"] = np.inf  # past three dropped rows: the error names the row of the source
    frame.to_csv(tmp_path / "s.csv", index=False)
    assert main(command + ["--drop-missing-y", "--out", str(tmp_path / "e.zarr")]) == 2
    assert "x column 'a': inf at row 600 (values must be finite)" in capsys.readouterr().err
    assert not (tmp_path / "e.zarr").exists()

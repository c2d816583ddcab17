"""Versioned model stores on real zarr: each save publishes an immutable version behind an atomic pointer;
a reader keeps the version it resolved, whole, while others are published and pruned; retention never
removes a version being read; a damaged or missing version is refused by name."""
import gc
import json
import os
import shutil

import numpy as np
import pytest

from jdlcore import JDL, GaussianKernel

pytest.importorskip("zarr")
from pipeline.model_store import load_model, save_model  # noqa: E402
from pipeline.versions import current_version, list_versions, prune, publish, resolve, versions_dir  # noqa: E402

from .conftest import bivariate_gaussian  # noqa: E402

QUERIES = np.linspace(-3, 3, 25)[:, None]


@pytest.fixture(scope="module")
def models():
    """Three fits of one sample that differ in reg (their conditional means differ)."""
    X, Y = bivariate_gaussian(400, seed=4)
    return [JDL(GaussianKernel(0.5), GaussianKernel(0.5), reg=reg, tol=1e-5).fit(X, Y) for reg in (1e-5, 1e-3, 1e-1)]


def means(model):
    return model.conditional_expectation(QUERIES)


def two_versions(models, target) -> tuple[str, str]:
    """Save the first two models at ``target`` one after the other; the names of the two versions."""
    names = []
    for model in models[:2]:
        save_model(model, target, overwrite=True)
        names.append(current_version(target))
    return names[0], names[1]


def test_each_save_publishes_a_version_and_moves_the_pointer(models, tmp_path):
    target = tmp_path / "model.zarr"
    save_model(models[0], target, run_key="a" * 64)
    first = current_version(target)
    assert first.endswith("-" + "a" * 12) and list_versions(target) == [first]
    assert target.is_symlink() and resolve(target) == versions_dir(target) / first
    with pytest.raises(ValueError, match="already exists"):
        save_model(models[1], target)
    save_model(models[1], target, overwrite=True, run_key="b" * 64)
    second = current_version(target)
    assert list_versions(target) == [first, second] and second > first  # names sort by publication time
    loaded = load_model(target)
    assert loaded.store_version_ == second and loaded.reg == 1e-3
    np.testing.assert_array_equal(means(loaded), means(load_model(versions_dir(target) / second)))
    assert load_model(versions_dir(target) / first).reg == 1e-5  # a version opens by its own path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.zarr", "model.zarr.versions"]


def test_a_reader_keeps_its_version_whole_while_others_are_published_and_pruned(models, tmp_path):
    target = tmp_path / "model.zarr"
    save_model(models[0], target)
    reader = load_model(target)  # resolved once; its atoms are read lazily from that version
    old = reader.store_version_
    expected = means(models[0])
    for model in models[1:]:
        save_model(model, target, overwrite=True, keep_versions=1)
    assert old in list_versions(target), "a version being read was pruned"
    assert len(list_versions(target)) == 2  # the one read, and the current one
    np.testing.assert_allclose(means(reader), expected, rtol=0, atol=1e-12)
    assert reader.y_atoms_[:].shape == (400, 1)  # the atoms are still there to read
    current = load_model(target)
    assert current.reg == 1e-1 and current.store_version_ != old
    del reader, current
    gc.collect()  # the leases end with the models
    save_model(models[0], target, overwrite=True, keep_versions=1)
    assert list_versions(target) == [current_version(target)]
    assert not [p for p in versions_dir(target).iterdir() if p.name.startswith(".")]


def test_retention_keeps_the_newest_and_the_current(models, tmp_path):
    target = tmp_path / "model.zarr"
    for k in range(5):
        save_model(models[k % 3], target, overwrite=True, keep_versions=3)
    kept = list_versions(target)
    assert len(kept) == 3 and kept[-1] == current_version(target)
    # a pointer moved back to an old version (a rollback) keeps it through later pruning
    os.symlink(os.path.join("model.zarr.versions", kept[0]), tmp_path / "link")
    os.replace(tmp_path / "link", target)
    assert prune(target, keep=1) == [kept[1]]  # the newest one and the current one are kept
    assert list_versions(target) == [kept[0], kept[2]] and load_model(target).store_version_ == kept[0]


def test_a_failed_write_publishes_nothing(models, tmp_path):
    target = tmp_path / "model.zarr"
    with pytest.raises(RuntimeError, match="disk full"):
        with publish(target, "c" * 64) as staging:
            staging.mkdir()
            (staging / "zarr.json").write_text("{}")
            raise RuntimeError("disk full")
    assert list(tmp_path.iterdir()) == []  # no pointer, no versions directory, no temporary
    save_model(models[0], target)
    version = current_version(target)
    with pytest.raises(RuntimeError):
        with publish(target, "d" * 64):
            raise RuntimeError("killed")
    assert list_versions(target) == [version] and current_version(target) == version
    with pytest.raises(ValueError, match=r"keep_versions: must be an integer >= 1 \(got 0\)"):
        save_model(models[1], target, overwrite=True, keep_versions=0)
    assert list_versions(target) == [version]


def test_a_plain_store_becomes_the_previous_version(models, tmp_path):
    """A store written before versioning (a plain directory) is moved into the versions on the next save."""
    from pipeline.model_store import model_to_dataset

    target = tmp_path / "model.zarr"
    model_to_dataset(models[0]).to_zarr(target, zarr_format=3, consolidated=False)
    assert load_model(target).store_version_ is None
    save_model(models[1], target, overwrite=True)
    old, new = list_versions(target)
    assert old.endswith("-unversioned") and current_version(target) == new
    assert load_model(versions_dir(target) / old).reg == 1e-5 and load_model(target).reg == 1e-3


def test_a_damaged_current_version_is_refused_by_name_and_the_previous_still_loads(models, tmp_path):
    target = tmp_path / "model.zarr"
    previous, current = two_versions(models, target)
    chunks = [p for p in (resolve(target) / "coef" / "c").rglob("*") if p.is_file()]
    chunks[0].write_bytes(chunks[0].read_bytes()[:-8] + b"\x00" * 8)  # one chunk overwritten in place
    with pytest.raises(ValueError) as error:
        load_model(target)
    assert str(error.value).splitlines() == [str(error.value)]
    assert f"model {target} (version {current}): variable 'coef'" in str(error.value)
    np.testing.assert_allclose(means(load_model(versions_dir(target) / previous)), means(models[0]), atol=1e-12)


def test_a_pointer_to_a_missing_version_and_a_newer_schema_are_refused_in_one_line(models, tmp_path):
    target = tmp_path / "model.zarr"
    first, gone = two_versions(models, target)
    shutil.rmtree(versions_dir(target) / gone)
    with pytest.raises(ValueError) as error:
        load_model(target)
    assert str(error.value) == (f"model {target}: points to version {gone}, which is missing "
                                f"(versions kept: {first})")
    save_model(models[1], target, overwrite=True)  # a new publish repairs the pointer
    newer = resolve(target) / "zarr.json"
    meta = json.loads(newer.read_text())
    meta["attributes"]["schema_version"] = 99
    newer.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"schema_version 99 is newer than this jdl reads") as error:
        load_model(target)
    assert "\n" not in str(error.value)


def test_jdl_versions_lists_them_and_goes_back_to_a_checked_one(models, tmp_path, capsys):
    from jdl.cli import main

    target = tmp_path / "model.zarr"
    for model in models[:2]:
        save_model(model, target, overwrite=True, run_key="e" * 64)
    first, second = list_versions(target)
    reader = load_model(target)
    assert main(["versions", str(target)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines] == [[first, "published"], ["*", second]]
    assert lines[1].endswith("run key eeeeeeeeeeee (current, being read)") and "being read" not in lines[0]
    assert main(["versions", str(target), "--use", first]) == 0
    assert capsys.readouterr().out.strip() == f"{target} -> version {first} (was {second})"
    assert current_version(target) == first and load_model(target).reg == 1e-5
    assert reader.store_version_ == second and reader.y_atoms_[:].shape == (400, 1)  # the reader is undisturbed
    assert main(["versions", str(target), "--use", "nope"]) == 2
    assert capsys.readouterr().err.strip() == (f"jdl versions: error: {target}: no version 'nope' "
                                               f"(versions kept: {first}, {second})")
    chunks = [p for p in (versions_dir(target) / second / "coef" / "c").rglob("*") if p.is_file()]
    chunks[0].write_bytes(b"\x00" * len(chunks[0].read_bytes()))
    assert main(["versions", str(target), "--use", second]) == 2  # a damaged version is not made current
    message = capsys.readouterr().err.strip()
    assert message.startswith(f"jdl versions: error: model {versions_dir(target) / second} (version {second}): "
                              "variable 'coef' is damaged (") and "\n" not in message  # the codec's words follow
    assert current_version(target) == first
    assert main(["versions", str(tmp_path / "absent.zarr")]) == 2
    assert capsys.readouterr().err.strip() == f"jdl versions: error: model: {tmp_path / 'absent.zarr'} does not exist"


def test_the_diagnostics_figure_follows_the_version_it_shows(models, tmp_path, capsys):
    """Each fit's figure is kept beside its version; ``<store>.diagnostics.png`` shows the current
    version's, also after ``jdl versions --use``, and a pruned version's figure goes with it."""
    from flows.artifacts import diagnostics_png_path, publish_fit
    from jdl.cli import main
    from pipeline.versions import DIAGNOSTICS, companion_path

    target = tmp_path / "model.zarr"
    figures = {}
    for model in models[:2]:
        save_model(model, target, overwrite=True, keep_versions=2)
        publish_fit(target, load_model(target))
        gc.collect()  # the loaded model's lease on its version ends with it
        figures[current_version(target)] = companion_path(target, current_version(target), DIAGNOSTICS).read_bytes()
    first, second = list_versions(target)
    shown = diagnostics_png_path(target)
    assert shown.is_symlink() and shown.read_bytes() == figures[second] != figures[first]
    assert main(["versions", str(target), "--use", first]) == 0
    assert shown.read_bytes() == figures[first]
    save_model(models[2], target, overwrite=True, keep_versions=2)  # prunes the first version
    assert list_versions(target) == [second, current_version(target)]
    assert not companion_path(target, first, DIAGNOSTICS).exists()
    assert not shown.exists() and not shown.is_symlink()  # the new version has no figure yet
    publish_fit(target, load_model(target))
    assert shown.read_bytes() == companion_path(target, current_version(target), DIAGNOSTICS).read_bytes()

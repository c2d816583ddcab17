"""Atomic stores: temporaries of killed writers are cleaned up, live and foreign ones are not."""
import subprocess
import sys

from pipeline.atomic import _host, atomic_store, remove_abandoned


def test_abandoned_temporaries_of_dead_writers_are_removed(tmp_path):
    target = tmp_path / "model.zarr"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    names = {
        "dead": f".model.zarr.tmp-{_host()}-{dead_pid}-abc",
        "alive": f".model.zarr.tmp-{_host()}-{__import__('os').getpid()}-def",
        "other_host": f".model.zarr.tmp-elsewhere-{dead_pid}-ghi",
        "other_target": f".data.zarr.tmp-{_host()}-{dead_pid}-jkl",
    }
    for name in names.values():
        (tmp_path / name).mkdir()
        (tmp_path / name / "chunk").write_bytes(b"partial")
    with atomic_store(target) as staging:
        assert staging.name.startswith(f".model.zarr.tmp-{_host()}-")
        staging.mkdir()
        (staging / "zarr.json").write_text("{}")
    assert (target / "zarr.json").read_text() == "{}"
    left = {p.name for p in tmp_path.iterdir()}
    assert names["dead"] not in left
    assert {names["alive"], names["other_host"], names["other_target"]} <= left
    assert remove_abandoned(tmp_path / "absent" / "x.zarr") == []


def test_a_replaced_store_is_moved_aside_then_removed(tmp_path):
    """The old store is renamed away before the new one is renamed in (readers miss it for two renames,
    not for a deletion), and nothing of either is left beside the target."""
    target = tmp_path / "scores.zarr"
    for content in ("old", "new"):
        with atomic_store(target, overwrite=content == "new") as staging:
            staging.mkdir()
            (staging / "zarr.json").write_text(content)
    assert (target / "zarr.json").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["scores.zarr"]

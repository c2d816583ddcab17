"""Fault injection on the command line, in separate processes: overlapping fits on one output, a score
reading while a fit publishes, and fits stopped mid-write by SIGTERM or SIGKILL. Each checks that
nothing is lost (every run succeeds, or the previous version stays current) and nothing is left
behind (no temporary, no lock file, no process).

A run is paused at a chosen function by a driver (``DRIVER``) that wraps the function to touch a
"ready" file and wait for a "go" file: the faults land at a known point without depending on speed.
"""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("zarr")
from jdl.cli import main  # noqa: E402
from .conftest import processes_in_group  # noqa: E402
from pipeline.locks import lock_path  # noqa: E402
from pipeline.model_store import load_model  # noqa: E402
from pipeline.scoring import open_scores  # noqa: E402
from pipeline.versions import current_version, list_versions, versions_dir  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
WAIT = 300  # seconds: generous bounds on event-driven waits, for a loaded machine
DRIVER = """
import importlib, os, sys, time
from pathlib import Path
module, _, name = os.environ["JDL_TEST_PAUSE"].partition(":")
module = importlib.import_module(module)
original = getattr(module, name)
def paused(*args, **kwargs):
    Path(os.environ["JDL_TEST_READY"]).touch()
    while not Path(os.environ["JDL_TEST_GO"]).exists():
        time.sleep(0.05)
    return original(*args, **kwargs)
setattr(module, name, paused)
from jdl.cli import main
sys.exit(main(sys.argv[1:]))
"""
PAUSE_MID_WRITE = "pipeline.model_store:_record_checksums"  # the version's arrays written, not yet published
PAUSE_MID_SCORE = "pipeline.scoring:score_chunk"  # the model loaded, no row scored yet


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}  # in-process runs


class Paused:
    """A ``jdl`` command in its own process group, paused at ``pause`` until ``go()``."""

    def __init__(self, tmp_path: Path, argv: list[str], pause: str, tag: str):
        self.ready, self.go_file = tmp_path / f"{tag}.ready", tmp_path / f"{tag}.go"
        env = {**_env(), "JDL_TEST_PAUSE": pause, "JDL_TEST_READY": str(self.ready), "JDL_TEST_GO": str(self.go_file)}
        self.process = subprocess.Popen([sys.executable, "-c", DRIVER, *argv], cwd=REPO, env=env, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + WAIT
        while not self.ready.exists():
            if self.process.poll() is not None:
                pytest.fail(f"{argv[0]} ended before its pause: {self.process.communicate()}")
            assert time.monotonic() < deadline, "the run never reached its pause"
            time.sleep(0.05)

    def go(self) -> tuple[int, str, str]:
        self.go_file.touch()
        out, err = self.process.communicate(timeout=WAIT)
        return self.process.returncode, out, err

    def signal(self, signum: int) -> tuple[int, str]:
        os.kill(self.process.pid, signum)
        out, err = self.process.communicate(timeout=WAIT)
        return self.process.returncode, err

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=WAIT)


@pytest.fixture
def staged(tmp_path):
    rng = np.random.default_rng(5)
    x = rng.uniform(-2, 2, 700)
    np.savez(tmp_path / "t.npz", x=x, y=np.sin(x) + 0.3 * rng.standard_normal(700))
    data = tmp_path / "d.zarr"
    assert main(["stage", str(tmp_path / "t.npz"), "--x", "x", "--y", "y", "--out", str(data)]) == 0
    return data


def fit_argv(data: Path, out: Path, reg: str = "1e-4", *extra: str) -> list[str]:
    return ["-v", "fit", str(data), "--out", str(out), "--lengthscale-x", "0.5", "--lengthscale-y", "0.4", "--reg", reg,
            "--scheduler", "memory", *extra]


def start(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "jdl.cli", *argv], cwd=REPO, env=_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def wait_for_line(process: subprocess.Popen, text: str) -> list[str]:
    """The stderr lines of ``process`` up to the first containing ``text`` (fails if it ends first)."""
    lines = []
    for line in process.stderr:
        lines.append(line)
        if text in line:
            return lines
    pytest.fail(f"no line with {text!r}: {''.join(lines)[-3000:]}")


def assert_nothing_left(out: Path) -> None:
    assert not lock_path(out).exists(), "lock file left behind"
    assert not [p.name for p in out.parent.iterdir() if ".tmp-" in p.name or ".link-" in p.name]
    if versions_dir(out).exists():
        assert not [p.name for p in versions_dir(out).iterdir() if p.name.startswith(".")], "temporary left behind"


@pytest.mark.parametrize("second_reg", ["1e-4", "1e-2"], ids=["same-parameters", "different-parameters"])
def test_two_fits_on_one_output_both_succeed(staged, tmp_path, second_reg):
    """The second fit waits for the first's lock (and says whose), then reuses its model (same inputs)
    or publishes its own as the next version (other inputs); neither fails."""
    out = tmp_path / "model.zarr"
    first = Paused(tmp_path, fit_argv(staged, out), PAUSE_MID_WRITE, "first")
    try:
        second = start(fit_argv(staged, out, second_reg))
        waited = wait_for_line(second, f"waiting for PID {first.process.pid} ")
        assert f"fit {staged} --out {out}" in waited[-1]  # the holder's command line
        assert first.go()[0] == 0
        second_out, second_err = second.communicate(timeout=WAIT)
        assert second.returncode == 0, second_err[-3000:]
    finally:
        first.close()
    versions = list_versions(out)
    if second_reg == "1e-4":
        assert "(reused: inputs unchanged)" in second_out and len(versions) == 1
    else:
        assert "reused" not in second_out and len(versions) == 2
        assert load_model(versions_dir(out) / versions[0]).reg == 1e-4  # the first run's model is kept whole
    model = load_model(out)
    assert model.reg == float(second_reg) and model.store_version_ == versions[-1]
    assert f"(version {versions[-1]})" in second_out or "reused" in second_out
    assert_nothing_left(out)


def test_a_score_reads_its_version_to_the_end_while_a_fit_publishes(staged, tmp_path):
    out, scores = tmp_path / "model.zarr", tmp_path / "scores.zarr"
    assert main(fit_argv(staged, out)[1:]) == 0
    old = current_version(out)
    reader = Paused(tmp_path, ["score", str(out), str(staged), "--out", str(scores), "--function", "mean",
                               "--scheduler", "memory"], PAUSE_MID_SCORE, "score")
    try:  # a new version with retention 1, while the score holds the old one
        assert main(fit_argv(staged, out, "1e-2", "--keep-versions", "1")[1:]) == 0
        new = current_version(out)
        assert new != old and list_versions(out) == [old, new], "the version being read was pruned"
        code, stdout, stderr = reader.go()
        assert code == 0, stderr[-3000:]
    finally:
        reader.close()
    assert f"with model version {old}" in stdout
    group = open_scores(scores)
    assert group.attrs["model_version"] == old
    assert group.attrs["model"] == str((versions_dir(out) / old).resolve())
    x = np.asarray(__import__("zarr").open_group(staged, mode="r")["x"][:])
    np.testing.assert_allclose(group["mean"][:], load_model(versions_dir(out) / old).conditional_expectation(x),
                               rtol=0, atol=1e-12)
    assert main(fit_argv(staged, out, "1e-3", "--keep-versions", "1")[1:]) == 0  # now free: pruned
    assert list_versions(out) == [current_version(out)]
    assert_nothing_left(out)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_fit_killed_mid_write_keeps_the_previous_version(staged, tmp_path, signum):
    """Stopped while its version is half written: the previous version stays current and whole. SIGTERM
    cleans up on the way out; after SIGKILL the next fit recovers the stale lock at once and removes the
    dead run's temporary."""
    out = tmp_path / "model.zarr"
    assert main(fit_argv(staged, out)[1:]) == 0
    previous = current_version(out)
    run = Paused(tmp_path, fit_argv(staged, out, "1e-2"), PAUSE_MID_WRITE, "killed")
    try:
        partial = [p for p in versions_dir(out).iterdir() if ".tmp-" in p.name]
        assert len(partial) == 1 and (partial[0] / "zarr.json").exists()  # caught mid-write
        code, stderr = run.signal(signum)
    finally:
        run.close()
    assert current_version(out) == previous and list_versions(out) == [previous]
    assert load_model(out).reg == 1e-4
    deadline = time.monotonic() + WAIT
    while processes_in_group(run.process.pid):
        assert time.monotonic() < deadline, "processes of the stopped command are left"
        time.sleep(0.2)
    if signum == signal.SIGTERM:
        assert code == 130
        stopped = "jdl fit: stopped; the output is absent or as the previous run left it"
        assert stderr.strip().splitlines()[-1] == stopped
        assert_nothing_left(out)
    else:
        assert code == -signal.SIGKILL
        assert lock_path(out).exists() and partial[0].exists()  # a killed process cleans nothing up
        again = start(fit_argv(staged, out, "1e-2"))
        stdout, stderr = again.communicate(timeout=WAIT)
        assert again.returncode == 0, stderr[-3000:]
        assert "waiting for" not in stderr  # the stale lock is taken at once
        assert load_model(out).reg == 1e-2 and list_versions(out) == [previous, current_version(out)]
        assert_nothing_left(out)


def unwritable_directory(tmp_path: Path) -> Path:
    """A directory this process cannot create files in (root may write anywhere but sysfs)."""
    if os.geteuid() == 0:
        return Path("/sys")
    directory = tmp_path / "read-only"
    directory.mkdir()
    directory.chmod(0o555)
    return directory


def test_an_unwritable_output_or_jdl_home_is_refused_before_any_work(staged, tmp_path, capsys):
    directory = unwritable_directory(tmp_path)
    out = directory / "model.zarr"
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(fit_argv(staged, out)[1:]) == 2
    (message,) = capsys.readouterr().err.strip().splitlines()  # the reason in the system's words
    assert message.startswith(f"jdl fit: error: fit: parameter out: directory {directory} is not writable (")
    assert message.endswith(f") (got {str(out)!r})")
    assert sorted(p.name for p in tmp_path.iterdir()) == before and not out.exists()
    env = {**_env(), "JDL_HOME": str(directory), "PREFECT_API_URL": "http://127.0.0.1:9/api"}
    served = subprocess.run([sys.executable, "-m", "jdl.cli", "serve"], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=WAIT)
    assert served.returncode == 2
    (message,) = served.stderr.strip().splitlines()
    assert message.startswith(f"jdl serve: error: JDL_HOME: directory {directory} is not writable (")


def test_a_damaged_store_fails_in_one_line_naming_the_store_and_the_array(staged, tmp_path, capsys):
    """Bytes damaged on disk: a chunk of the staged data (score, evaluate and fit read it) and the
    metadata of one array of a model version (inspect opens it). Each command prints exactly one line,
    naming the store and the array (and the chunk's rows), exits with 2 and writes nothing. zarr reads a
    group's members side by side; those left running when one failed used to fail at exit, each
    printed as a "Task exception was never retrieved" (about 3 runs in 4), hence a process per try."""
    model = tmp_path / "m.zarr"
    assert main(fit_argv(staged, model)[1:]) == 0
    data = tmp_path / "damaged.zarr"
    assert main(["stage", str(tmp_path / "t.npz"), "--x", "x", "--y", "y", "--chunk-size", "200", "--out", str(data)]) == 0
    (data / "x" / "c" / "1" / "0").write_bytes(b"\x28\xb5\x2f\xfd not a zstd frame")
    named = f"data {data}: array 'x', chunk (1, 0) (rows 200 to 399) cannot be read (RuntimeError: "
    capsys.readouterr()
    for argv in (["score", str(model), str(data), "--function", "mean", "--out", str(tmp_path / "s.zarr")],
                 ["evaluate", str(model), str(data), "--out", str(tmp_path / "e.zarr")],
                 fit_argv(data, tmp_path / "m2.zarr")[1:]):
        assert main(argv) == 2
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"jdl {argv[0]}: error: {named}"), lines
    (model.resolve() / "x_rotation" / "zarr.json").write_text("")
    for _ in range(3):
        result = subprocess.run([sys.executable, "-m", "jdl.cli", "inspect", str(model)], cwd=REPO, env=_env(),
                                capture_output=True, text=True, timeout=WAIT)
        lines = result.stderr.splitlines()
        assert result.returncode == 2 and len(lines) == 1, result.stderr[-3000:]
        assert lines[0].startswith(f"jdl inspect: error: model {model} ") and "not a readable zarr v3 store" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".zarr", ".png")) == [
        "d.zarr", "damaged.zarr", "m.zarr", "m.zarr.diagnostics.png"]

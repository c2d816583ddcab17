import subprocess
import sys

from flows.cli import main


def test_demo_reports_a_normalized_positive_fit(capsys):
    assert main(["demo", "--rows", "3000", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "n = 3,000 rows" in out
    assert "max |sum of conditional weights - 1| = " in out
    normalization = float(out.split("max |sum of conditional weights - 1| = ")[1].split()[0])
    assert normalization < 1e-12
    grid_min = float(out.split("min of 1 + h on the grid = ")[1].split(",")[0])
    assert grid_min >= 0
    rmse = float(out.split("conditional mean RMSE vs truth = ")[1].split()[0])
    assert rmse < 0.2


def test_errors_are_one_line_with_nonzero_exit():
    result = subprocess.run([sys.executable, "-m", "flows.cli", "demo", "--rows", "5"], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["jdl demo: error: rows: the demo needs at least 100 rows, got 5"]
    result = subprocess.run([sys.executable, "-m", "flows.cli", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "demo" in result.stdout

"""The README is a user's guide that works as written: its Python quickstart runs, its `jdl` commands
parse with the real command line, its links resolve, and it stays short."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def fenced_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, re.S)


def test_readme_is_a_short_guide():
    assert len(README.splitlines()) <= 250


def test_python_quickstart_runs():
    """The quickstart's own assertions (weights >= 0, rows sum to 1, a state round trip) run too."""
    (block,) = [b for b in fenced_blocks("python") if "from jdlcore import" in b]
    exec(compile(block, "README.md quickstart", "exec"), {"__name__": "readme_quickstart"})


def readme_commands() -> list[str]:
    commands = []
    for block in fenced_blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("jdl "):
                commands.append(line)
    return commands


@pytest.mark.parametrize("command", readme_commands())
def test_readme_commands_parse(command):
    """Every option the README shows exists with that spelling (argparse exits 2 on an unknown one)."""
    from jdl.cli import build_parser

    args = build_parser().parse_args(shlex.split(command)[1:])
    assert args.command == command.split()[1]


def test_readme_links_resolve():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert links
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, missing

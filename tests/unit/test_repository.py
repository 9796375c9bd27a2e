"""The repository's promises to a new user: the README's commands, CI running exactly the test command, make help."""

from __future__ import annotations

import re
import subprocess

from tests.support.paths import REPO


def readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", text, re.S)
    assert block, "README.md has no ```sh block with the two commands"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    return [c for c in commands if c]


def ci_commands() -> list[str]:
    lines = (REPO / ".ci" / "run").read_text().splitlines()
    body = [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith("#")]
    return body


def test_readme_starts_with_demo_then_test():
    commands = readme_commands()
    assert len(commands) >= 2
    assert commands[0] == "make demo"
    assert commands[1] == "make test"


def test_ci_runs_exactly_the_readme_test_command():
    test_command = readme_commands()[1]
    assert ci_commands()[-1] == test_command, ".ci/run must end by running the README's test command"


def test_make_help_lists_every_target():
    makefile = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([a-zA-Z0-9_-]+):", makefile, re.M))
    out = subprocess.run(["make", "-s", "help"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out)
    listed = {line.split()[0] for line in plain.splitlines() if line.strip()}
    missing = sorted(targets - listed)
    assert not missing, f"targets without a '## ' help text: {missing}"


def test_where_things_live_names_only_what_exists():
    """Every path in the README's "Where things live" table exists: relative to the repository, or to the row's
    first folder (`runner.py` in the row of `agent/tpcmesh_agent/...`)."""
    text = (REPO / "README.md").read_text()
    section = re.search(r"^## Where things live\n(.*?)^## ", text, re.S | re.M)
    assert section, "README.md has no 'Where things live' section"
    missing = []
    for row in re.findall(r"^\|[^|]+\|([^|]+)\|$", section.group(1), re.M):
        names = [n for n in re.findall(r"`([^`\s]+)`", row) if "/" in n or n.endswith((".py", ".yaml", ".json"))]
        folders = [n for n in names if "/" in n]
        if not folders:
            continue
        base = REPO / folders[0]
        base = base if base.is_dir() else base.parent
        missing += [n for n in names if not (REPO / n.rstrip("/")).exists() and not (base / n.rstrip("/")).exists()]
    assert not missing, f"README's 'Where things live' names paths that do not exist: {missing}"

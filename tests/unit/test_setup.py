"""Fresh-machine set-up: the Go the control-plane build picks (hack/go-toolchain.py) and hack/setup.sh without npm.

A fresh Debian 12 cannot be booted here; these run the real scripts with fake `go`/missing `npm` on PATH instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO, VENV_BIN

sys.path.insert(0, str(REPO / "hack"))
go_toolchain = __import__("go-toolchain")

SCRIPT = REPO / "hack" / "go-toolchain.py"


def fake_go(directory: Path, version: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    go = directory / "go"
    go.write_text(f'#!/bin/sh\necho "go version {version} linux/amd64"\n')
    go.chmod(0o755)
    return directory


def run_script(tmp_path: Path, path_first: Path | None, *args: str) -> subprocess.CompletedProcess:
    path = os.pathsep.join([*([str(path_first)] if path_first else []), "/usr/bin", "/bin"])
    env = {"PATH": path, "TPCMESH_CACHE": str(tmp_path / "cache"), "GOPROXY": "off", "HOME": str(tmp_path)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)


def test_debians_old_go_is_passed_over_for_the_cached_official_toolchain(tmp_path):
    old = fake_go(tmp_path / "debian", "go1.19.8")
    cached = fake_go(tmp_path / "cache" / "go" / go_toolchain.PINNED / "bin", go_toolchain.PINNED)
    # k8s.io/kubernetes' go.mod as the proxy serves it (kept in the cache: no network here)
    mod = tmp_path / "cache" / "go" / "mod" / "k8s.io_kubernetes@v1.34.4.mod"
    mod.parent.mkdir(parents=True)
    mod.write_text("module k8s.io/kubernetes\n\ngo 1.24.0\n\ngodebug default=go1.24\n")
    out = run_script(tmp_path, old, "--module", "k8s.io/kubernetes@v1.34.4")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(cached)
    assert "go1.19.8, older than the go1.24.0 required" in out.stderr


def test_a_new_enough_go_on_path_is_used_as_it_is(tmp_path):
    new = fake_go(tmp_path / "usr-local", "go1.26.1")
    out = run_script(tmp_path, new, "--requires", "1.24.0")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(new.resolve()) and not out.stderr


def test_without_a_usable_go_or_a_proxy_it_says_what_is_wrong(tmp_path):
    out = run_script(tmp_path, fake_go(tmp_path / "debian", "go1.19.8"), "--requires", "1.24.0")
    assert out.returncode == 1 and out.stdout == ""
    assert "GOPROXY='off' names no proxy" in out.stderr


def test_a_requirement_above_the_pinned_toolchain_names_the_pin(tmp_path):
    out = run_script(tmp_path, None, "--requires", "1.99.0")
    assert out.returncode == 1
    assert f"the toolchain {go_toolchain.PINNED} is older than the go1.99.0 required" in out.stderr


def test_the_zip_hash_is_gos_own_h1():
    """hash1() against `go mod download`'s checked sum of a real module zip (the pinned toolchain's check uses it)."""
    from tests.support.controlplane import go_command

    go = go_command()
    if go is None:
        pytest.skip("no Go here")
    out = subprocess.run([go, "mod", "download", "-json", "github.com/pmezard/go-difflib@v1.0.0"], capture_output=True,
                         text=True, timeout=120, cwd="/", env={**os.environ, "GOFLAGS": "-mod=mod"})
    info = json.loads(out.stdout or "{}")
    if "Zip" not in info:
        pytest.skip(f"module not downloadable here: {info.get('Error') or out.stderr[-300:]}")
    assert go_toolchain.hash1(Path(info["Zip"])) == info["Sum"]


def test_versions_compare_as_go_orders_them():
    v = go_toolchain.parse_version
    assert v("go version go1.19.8 linux/amd64") < v("1.24.0") <= v("go1.24.0") < v("go1.24.13") < v("go1.26")


def test_setup_without_npm_warns_and_still_completes(tmp_path):
    """No root, no npm: the virtualenv is set up, the chart assets are skipped with a warning (make demo runs)."""
    for rel in ("hack/setup.sh", "hack/debian-packages.txt", "requirements-dev.txt", "agent/pyproject.toml",
                "operator/pyproject.toml", "lab/pyproject.toml", "dashboard/requirements.txt", "dashboard/package.json",
                "dashboard/package-lock.json", "dashboard/hack-assets.sh"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, tmp_path / rel)
    no_npm = tmp_path / "path"
    no_npm.mkdir()
    for tool in ("bash", "cat", "sha256sum", "cut", "mkdir", "touch", "rm", "dirname", "grep", "dpkg-query", "id"):
        found = shutil.which(tool)
        if found:
            (no_npm / tool).symlink_to(found)
    # A virtualenv of its own whose stamp says the pins are installed: only the checks and the asset step run. (With
    # the repository's, a changed pyproject made setup.sh install the copies here, which hold no packages, into it
    # as editable installs: every later test lost tpcmesh_agent, tpcmesh_operator and tpcmesh_lab.)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(VENV_BIN / "python")
    pins = b"".join((tmp_path / rel).read_bytes() for rel in ("requirements-dev.txt", "agent/pyproject.toml",
                                                              "operator/pyproject.toml", "lab/pyproject.toml",
                                                              "dashboard/requirements.txt"))
    (venv / ".tpcmesh").mkdir()
    (venv / ".tpcmesh" / f"pip-{hashlib.sha256(pins).hexdigest()[:16]}").touch()
    env = {"PATH": str(no_npm), "VENV": str(venv), "HOME": str(tmp_path)}
    out = subprocess.run(["bash", str(tmp_path / "hack" / "setup.sh"), "--no-apt"], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "npm is missing" in out.stderr and "Setup complete" in out.stderr
    assert not (tmp_path / "dashboard" / "results" / "static" / "vendor").exists()

"""An earlier tpcmesh commit's chart and images, for the upgrade test: a clone of this repository checked out at the
commit and built by that commit's own hack/build-images.sh, both kept in ~/.cache/tpcmesh/upgrade/<commit>/ (the
images tagged <commit>, so they never shadow the working tree's). A second call with the cache in place is the build
script's hash check (seconds); a cold cache costs a full build of three images (about 4 minutes here)."""

from __future__ import annotations

import os
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from tpcmesh_lab.cluster import IMAGE_RELEASE
from tpcmesh_lab.controlplane import CACHE

from tests.support.paths import REPO

COMPONENTS = ("agent", "operator", "dashboard")


@dataclass(frozen=True)
class OldRelease:
    commit: str
    source: Path  # the checkout: its chart is source / "charts/tpcmesh"
    images: list[Path]  # OCI archives of its three images, tagged `commit`

    @property
    def chart(self) -> Path:
        return self.source / "charts" / "tpcmesh"


def _git(*args: str, cwd: Path) -> str:
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} in {cwd}: {r.stderr.strip()}")
    return r.stdout.strip()


def build(commit: str) -> OldRelease:
    full = _git("rev-parse", "--verify", f"{commit}^{{commit}}", cwd=REPO)  # a shallow clone lacks it: said here
    home = CACHE / "upgrade" / commit
    source = home / "src"
    if not (source / ".git").exists() or _git("rev-parse", "HEAD", cwd=source) != full:
        subprocess.run(["rm", "-rf", str(source)], check=True)
        home.mkdir(parents=True, exist_ok=True)
        # a plain local clone (its own objects: it outlives this checkout), then the commit, detached
        _git("clone", "--quiet", "--no-checkout", str(REPO), str(source), cwd=home)
        _git("checkout", "--quiet", "--detach", full, cwd=source)
    env = {**os.environ, "IMAGE_TAG": commit, "TPCMESH_CACHE": str(home)}
    r = subprocess.run([str(source / "hack" / "build-images.sh"), *COMPONENTS], cwd=source, env=env,
                       capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"{commit}'s hack/build-images.sh failed:\n{r.stderr[-4000:]}")
    images = [home / "images" / IMAGE_RELEASE / f"tpcmesh-{c}.tar" for c in COMPONENTS]
    missing = [str(p) for p in images if not p.exists()]
    if missing:
        raise RuntimeError(f"{commit}'s build left no {', '.join(missing)}")
    return OldRelease(commit, source, images)


_started: dict[str, tuple[threading.Thread, list]] = {}


def start_building(commit: str) -> None:
    """Begin `build(commit)` in the background (the upgrade test's module is collected: on a cold cache its
    images build while the package's cluster starts and its other tests run, not on the suite's clock)."""
    if commit in _started:
        return
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(build(commit))
        except BaseException as e:  # noqa: BLE001 - raised again by built() in the test that needs it
            outcome.append(e)

    thread = threading.Thread(target=run, name=f"build {commit}", daemon=True)
    _started[commit] = (thread, outcome)
    thread.start()


def built(commit: str) -> OldRelease:
    """The release `start_building` began (waiting for it), or built here and now."""
    if commit not in _started:
        return build(commit)
    thread, outcome = _started[commit]
    thread.join()
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]

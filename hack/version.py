#!/usr/bin/env python3
"""tpcmesh's one version: the chart's appVersion (charts/tpcmesh/Chart.yaml). The chart's version, the image tags
and the Python packages move with it.

Read from Chart.yaml where it is used: the Makefile's IMAGE_TAG, hack/build-images.sh's default tag (also the
images' org.opencontainers.image.version label), the chart's default image tag (`image.tag: ""` means appVersion).
Written from it here, because their build tools cannot read a file outside the package (pip builds agent/ and
operator/ alone inside the images): the chart's `version`, the packages' pyproject.toml and the agent's
`__version__`.

    hack/version.py                    print the version
    hack/version.py set 0.2.0          write it everywhere (`make version VERSION=0.2.0`; then `make manifests`)
    hack/version.py check [--tag v0.2.0]
                                       exit 1 naming each place that differs (and a release tag that is not it);
                                       the release workflow runs it, tests/unit/test_version.py runs the same
                                       comparison
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHART = Path("charts/tpcmesh/Chart.yaml")
PYPROJECTS = (Path("agent/pyproject.toml"), Path("operator/pyproject.toml"), Path("lab/pyproject.toml"))
AGENT_INIT = Path("agent/tpcmesh_agent/__init__.py")
# SemVer 2.0 as Helm requires for a chart version (pre-release and build parts allowed)
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$")

# place -> (pattern whose group 2 is the version, how it is written); each matches one line
_CHART_VERSION = re.compile(r"^(version: *)(\S+?)()$", re.MULTILINE)
_CHART_APP = re.compile(r'^(appVersion: *")([^"]*)(")$', re.MULTILINE)
_PYPROJECT = re.compile(r'^(version = ")([^"]*)(")$', re.MULTILINE)
_INIT = re.compile(r'^(__version__ = ")([^"]*)(")$', re.MULTILINE)


def places() -> list[tuple[Path, re.Pattern[str]]]:
    return [(CHART, _CHART_VERSION), (CHART, _CHART_APP), *((p, _PYPROJECT) for p in PYPROJECTS),
            (AGENT_INIT, _INIT)]


def _read(root: Path, path: Path, pattern: re.Pattern[str]) -> str:
    found = pattern.findall((root / path).read_text())
    if len(found) != 1:
        raise SystemExit(f"{path}: expected one line matching {pattern.pattern!r}, found {len(found)}")
    return str(found[0][1])


def version(root: Path = REPO) -> str:
    """The appVersion of the chart: the one source."""
    return _read(root, CHART, _CHART_APP)


def drift(root: Path = REPO) -> list[str]:
    """One line per place whose version is not the chart's appVersion (empty when all agree)."""
    want = version(root)
    out = [f"{path}: {got!r} (line {pattern.pattern!r}) is not the chart's appVersion {want!r}"
           for path, pattern in places() if (got := _read(root, path, pattern)) != want]
    # the pyproject files also through a TOML parser: the line found above is the [project] version
    for path in PYPROJECTS:
        got = tomllib.loads((root / path).read_text())["project"]["version"]
        if got != want:
            out.append(f"{path}: [project] version {got!r} is not the chart's appVersion {want!r}")
    if not SEMVER.match(want):
        out.append(f"{CHART}: appVersion {want!r} is not SemVer 2 (x.y.z), which Helm requires of the chart version")
    return out


def set_version(new: str, root: Path = REPO) -> list[Path]:
    if not SEMVER.match(new):
        raise SystemExit(f"version {new!r} is not SemVer 2 (x.y.z[-pre][+build])")
    changed = []
    for path, pattern in places():
        text = (root / path).read_text()
        updated = pattern.sub(lambda m: f"{m.group(1)}{new}{m.group(3)}", text, count=1)
        if updated != text:
            (root / path).write_text(updated)
            changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=REPO, help="another copy of the repository")
    sub = parser.add_subparsers(dest="command")
    s = sub.add_parser("set", help="write VERSION everywhere")
    s.add_argument("version")
    c = sub.add_parser("check", help="exit 1 naming each place that differs")
    c.add_argument("--tag", help="a release tag (vX.Y.Z) that must name the version")
    args = parser.parse_args(argv)
    if args.command == "set":
        for path in set_version(args.version, args.root):
            print(f"wrote {args.version} into {path}")
        return 0
    if args.command == "check":
        problems = drift(args.root)
        if args.tag is not None and args.tag != f"v{version(args.root)}":
            problems.append(f"tag {args.tag} is not v + the chart's appVersion (v{version(args.root)})")
        for p in problems:
            print(p, file=sys.stderr)
        return 1 if problems else 0
    print(version(args.root))
    return 0


if __name__ == "__main__":
    sys.exit(main())

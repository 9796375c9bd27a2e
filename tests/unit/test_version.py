"""One version (hack/version.py): the chart's appVersion is the source; the chart's version, the Python packages, the
image tags and the images' version label follow it, and the release workflow refuses a tree where they differ or
where the chart's CRDs are not manifests/crds."""

from __future__ import annotations

import filecmp
import importlib.util
import re
import shutil

import pytest
import yaml

from tests.support.paths import REPO

_spec = importlib.util.spec_from_file_location("hack_version", REPO / "hack" / "version.py")
assert _spec and _spec.loader
version = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(version)

CHART = REPO / "charts" / "tpcmesh"
COMPONENTS = ("agent", "operator", "dashboard")
APP_VERSION = re.escape("sed -n 's/^appVersion: *\"\\(.*\\)\"/\\1/p' charts/tpcmesh/Chart.yaml")


def test_every_written_place_is_the_charts_app_version():
    assert version.drift() == []
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == version.version()
    from tpcmesh_agent import __version__
    assert __version__ == version.version()


@pytest.fixture
def copy(tmp_path):
    """The files hack/version.py reads and writes, in a copy of the repository's layout."""
    for path, _ in version.places():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / path, tmp_path / path)
    return tmp_path


@pytest.mark.parametrize("where", ["agent/pyproject.toml", "operator/pyproject.toml", "chart version",
                                   "agent/tpcmesh_agent/__init__.py"])
def test_a_place_left_behind_is_named(copy, where):
    current = version.version()
    if where == "chart version":
        path = copy / "charts/tpcmesh/Chart.yaml"
        path.write_text(path.read_text().replace(f"version: {current}\n", "version: 9.9.9\n", 1))
        where = "charts/tpcmesh/Chart.yaml"
    else:
        path = copy / where
        path.write_text(path.read_text().replace(f'"{current}"', '"9.9.9"', 1))
    problems = version.drift(copy)
    assert problems and all(p.startswith(where) for p in problems), problems
    assert "'9.9.9'" in problems[0] and f"appVersion '{current}'" in problems[0]
    assert version.main(["--root", str(copy), "check"]) == 1


def test_set_writes_every_place_and_check_passes(copy, capsys):
    assert version.main(["--root", str(copy), "set", "1.2.3-rc.1"]) == 0
    assert version.version(copy) == "1.2.3-rc.1" and version.drift(copy) == []
    assert version.main(["--root", str(copy), "check", "--tag", "v1.2.3-rc.1"]) == 0
    assert version.main(["--root", str(copy), "check", "--tag", "v1.2.3"]) == 1
    assert "tag v1.2.3 is not v + the chart's appVersion (v1.2.3-rc.1)" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="'1.2' is not SemVer"):
        version.set_version("1.2", copy)


def test_the_builds_and_the_chart_read_the_app_version():
    """Makefile's IMAGE_TAG, hack/build-images.sh's tag and label, the chart's default tag: all from appVersion."""
    assert re.search(rf"^IMAGE_TAG \?= \$\$\({APP_VERSION}\)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    build = (REPO / "hack" / "build-images.sh").read_text()
    assert re.search(rf'^VERSION="\$\({APP_VERSION}\)"$', build, re.MULTILINE)
    assert 'TAG="${IMAGE_TAG:-$VERSION}"' in build
    assert build.count('--build-arg TPCMESH_VERSION="$VERSION"') == 2  # docker and buildah
    for c in COMPONENTS:
        df = (REPO / "Dockerfiles" / f"{c}.Dockerfile").read_text()
        final = df[df.rindex("\nFROM "):]
        assert "ARG TPCMESH_VERSION=" in final and 'org.opencontainers.image.version="${TPCMESH_VERSION}"' in final
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["tag"] == ""
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert "(default .ctx.Chart.AppVersion .ctx.Values.image.tag)" in helpers


def test_release_checks_versions_and_crds_before_it_pushes():
    wf = yaml.safe_load((REPO / ".github" / "workflows" / "release.yaml").read_text())
    check = [s.get("run", "") for s in wf["jobs"]["check"]["steps"]]
    assert any('hack/version.py check --tag "$GITHUB_REF_NAME"' in r for r in check), check
    assert any("diff -ru manifests/crds charts/tpcmesh/crds" in r for r in check), check
    assert wf["jobs"]["images"]["needs"] == "check"
    build = next(s for s in wf["jobs"]["images"]["steps"] if s.get("uses", "").startswith("docker/build-push"))
    assert build["with"]["build-args"] == "TPCMESH_VERSION=${{ env.VERSION }}"
    # and what it checks holds in this tree
    crds = sorted(p.name for p in (REPO / "manifests" / "crds").glob("*.yaml"))
    assert crds == sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    _, mismatch, errors = filecmp.cmpfiles(REPO / "manifests" / "crds", CHART / "crds", crds, shallow=False)
    assert not mismatch and not errors, (mismatch, errors)

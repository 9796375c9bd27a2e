"""The images' Debian release and the versions of what they run, as the chart (Chart.yaml annotations), README.md and
the chart's README state them: the three agree, the Dockerfiles and hack/build-images.sh build that release, and
the images hack/build-images.sh built (their package lists, beside the archives) have those versions."""

from __future__ import annotations

import re

import pytest
import yaml
from tpcmesh_lab.cluster import IMAGE_CACHE, IMAGE_RELEASE

from tests.support.paths import REPO

CHART = yaml.safe_load((REPO / "charts" / "tpcmesh" / "Chart.yaml").read_text())
STATED = {k.removeprefix("tpcmesh.io/image-"): v for k, v in CHART["annotations"].items()
          if k.startswith("tpcmesh.io/image-")}
CODENAMES = {"12": "bookworm", "13": "trixie"}
# annotation -> (image, Debian package whose upstream version it is)
PACKAGES = {
    "xrootd": [("agent", "xrootd-server"), ("agent", "xrootd-server-plugins"), ("agent", "xrootd-scitokens-plugins"),
               ("agent", "xrootd-client"), ("operator", "xrootd-client")],
    "globus-gridftp-server": [("agent", "globus-gridftp-server-progs")],
    "iperf3": [("agent", "iperf3")],
    "gfal2": [("operator", "gfal2-plugin-gridftp")],
    "python": [(image, "python3") for image in ("agent", "operator", "dashboard")],
}
# how README.md and the chart's README name each annotation's value
PHRASES = {"debian": "Debian {}", "xrootd": "XRootD {}", "globus-gridftp-server": "globus-gridftp-server {}",
           "iperf3": "iperf3 {}", "gfal2": "gfal2 {}", "python": "Python {}"}


def upstream(version: str) -> str:
    """A Debian version's upstream part: 1:5.8.1-1+b2 -> 5.8.1."""
    return version.split(":", 1)[-1].rsplit("-", 1)[0]


def test_the_chart_states_every_version():
    assert set(STATED) == set(PHRASES) == {"debian", *PACKAGES}, STATED
    major, codename = re.fullmatch(r"(\d+) \((\w+)\)", STATED["debian"]).groups()
    assert CODENAMES[major] == codename


@pytest.mark.parametrize("doc", ["README.md", "charts/tpcmesh/README.md"])
def test_the_readmes_state_the_charts_versions(doc):
    text = re.sub(r"[*`]", "", (REPO / doc).read_text())
    debian = STATED["debian"].split()[0]
    assert f"Debian {debian} ({CODENAMES[debian]})" in text, doc
    for name, phrase in PHRASES.items():
        if name != "debian":
            assert phrase.format(STATED[name]) in text, f"{doc} does not say {phrase.format(STATED[name])}"
    for other in re.findall(r"XRootD (\d+\.\d+\.\d+)", text):  # 5.5.3: the development machines' own
        assert other in (STATED["xrootd"], "5.5.3"), f"{doc} names XRootD {other}"


def test_the_dockerfiles_and_the_build_script_build_that_release():
    major, codename = STATED["debian"].split()[0], CODENAMES[STATED["debian"].split()[0]]
    for df in sorted((REPO / "Dockerfiles").glob("*.Dockerfile")):
        text = df.read_text()
        assert re.findall(r"^ARG DEBIAN_IMAGE=docker\.io/library/debian:(\d+)\.\d+-slim$", text, re.M) == [major], df
    script = (REPO / "hack" / "build-images.sh").read_text()
    assert re.search(rf"^DEBIAN_RELEASE={codename}$", script, re.M)
    assert IMAGE_RELEASE == codename  # where the cluster looks for the archives the script writes


def built_packages(image: str) -> dict[str, str]:
    path = IMAGE_CACHE / IMAGE_RELEASE / f"tpcmesh-{image}.packages"
    if not path.exists():
        pytest.skip(f"{path} missing: the images are not built here (make images)")
    return dict(line.split("\t") for line in path.read_text().splitlines() if line)


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_the_built_images_have_the_stated_versions(name):
    for image, pkg in PACKAGES[name]:
        have = built_packages(image)
        assert pkg in have, f"tpcmesh-{image} has no {pkg}"
        got, stated = upstream(have[pkg]), STATED[name]
        assert got == stated or got.startswith(stated + "."), f"tpcmesh-{image}: {pkg} {have[pkg]}, stated {stated}"


def test_the_built_images_are_that_debian_release():
    major = STATED["debian"].split()[0]
    for image in ("agent", "operator", "dashboard"):
        base_files = built_packages(image)["base-files"]  # 13.8+deb13u8: Debian 13.8
        assert base_files.startswith(major + "."), f"tpcmesh-{image}: base-files {base_files}, stated Debian {major}"

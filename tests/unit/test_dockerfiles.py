"""Dockerfiles/: each image installs every command its entrypoint (and the chart's containers) run; pinned
bases, non-root users, no secrets."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.support.paths import REPO

DOCKERFILES = REPO / "Dockerfiles"
PACKAGES = REPO / "hack" / "debian-packages.txt"
# image -> how it installs its Python commands
PYTHON_SOURCES = {"operator": "operator/pyproject.toml", "agent": "agent/pyproject.toml",
                  "dashboard": "dashboard/requirements.txt"}


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", "\n".join(line for line in path.read_text().splitlines()
                                           if not line.lstrip().startswith("#")))
    out = []
    for line in text.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def final_stage(path: Path) -> list[tuple[str, str]]:
    ins = instructions(path)
    last_from = max(i for i, (w, _) in enumerate(ins) if w == "FROM")
    return ins[last_from:]


def console_scripts(pyproject: str) -> set[str]:
    return set(tomllib.loads((REPO / pyproject).read_text())["project"].get("scripts", {}))


def requirement_commands(requirements: str) -> set[str]:
    """The console scripts of the distributions pinned in a requirements file, read from their installed metadata
    (the virtualenv has the same pins; a version that differs is an error, not a guess)."""
    from importlib import metadata

    scripts: set[str] = set()
    for line in (REPO / requirements).read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, _, pinned = line.split("#")[0].strip().partition("==")
        name = re.split(r"[<>\[ ]", name)[0]
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            pytest.fail(f"{name} ({requirements}) is not installed here: run hack/setup.sh")
        assert not pinned or dist.version == pinned, f"{name}: {requirements} pins {pinned}, installed {dist.version}"
        scripts |= {ep.name for ep in dist.entry_points if ep.group == "console_scripts"}
    return scripts


def agent_packages() -> list[tuple[str, str]]:
    """(package, what) for every hack/debian-packages.txt line whose use starts with 'agent:'."""
    rows = []
    for line in PACKAGES.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        pkg, _, use = line.partition("\t")
        if use.startswith("agent:"):
            rows.append((pkg.strip(), use.removeprefix("agent:").strip()))
    return rows


def apt_installed(stage: list[tuple[str, str]]) -> list[str]:
    """Debian packages the stage installs by name (`apt-get install [options] pkg ...`)."""
    pkgs = []
    for m in re.finditer(r"apt-get install((?:\s+[^\s;&|]+)+)", " ".join(a for w, a in stage if w == "RUN")):
        pkgs += [w for w in m.group(1).split() if not w.startswith("-")]
    return pkgs


def essential_packages() -> list[str]:
    """The Essential packages of this Debian release: every Debian base image has them (dash gives `sh`)."""
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Essential}\n"], capture_output=True, text=True,
                         check=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.endswith(" yes")]


def package_commands(pkg: str) -> set[str]:
    return {Path(p).name for p in dpkg_files(pkg) if re.search(r"/s?bin/[^/]+$", p)}


def provided_commands(image: str) -> set[str]:
    """Commands on the image's PATH, derived from its Dockerfile: the Debian base's Essential packages, the Debian
    packages it installs (for the agent also those its awk picks from hack/debian-packages.txt), and its
    virtualenv's python3 and console scripts when `ENV PATH` puts the venv first."""
    stage = final_stage(DOCKERFILES / f"{image}.Dockerfile")
    args = dict(a.split("=", 1) for w, a in instructions(DOCKERFILES / f"{image}.Dockerfile")
                if w == "ARG" and "=" in a)
    base = next(a for w, a in stage if w == "FROM").split()[0]
    base = args.get(base.strip("${}"), base) if base.startswith("$") else base
    cmds: set[str] = set()
    if re.match(r"(docker\.io/)?(library/)?debian:", base):
        for pkg in essential_packages():
            cmds |= package_commands(pkg)
    for pkg in apt_installed(stage) + ([p for p, _ in agent_packages()] if image == "agent" else []):
        cmds |= package_commands(pkg)
    venv = re.search(r"python3 -m venv (\S+)", " ".join(a for w, a in stage if w == "RUN"))
    path = " ".join(a for w, a in stage if w == "ENV")
    if venv and re.search(rf"PATH={re.escape(venv.group(1))}/bin(:|\s|$)", path):
        src = PYTHON_SOURCES[image]
        cmds |= {"python", "python3", "pip"}
        cmds |= console_scripts(src) if src.endswith(".toml") else requirement_commands(src)
    return cmds


def dpkg_files(pkg: str) -> list[str]:
    out = subprocess.run(["dpkg-query", "-L", pkg], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.fail(f"Debian package {pkg} (hack/debian-packages.txt) is not installed here: {out.stderr.strip()}")
    return out.stdout.splitlines()


@pytest.mark.parametrize("image", sorted(PYTHON_SOURCES))
def test_entrypoint_commands_are_installed_by_the_dockerfile(image):
    path = DOCKERFILES / f"{image}.Dockerfile"
    stage = final_stage(path)
    entry = [json.loads(a) for w, a in stage if w == "ENTRYPOINT"]
    assert entry and isinstance(entry[-1], list), f"{path.name}: ENTRYPOINT must be an exec-form JSON array"
    command = entry[-1][0]
    src = PYTHON_SOURCES[image]
    run = " ".join(a for w, a in stage if w == "RUN")
    copies = " ".join(a for w, a in stage if w == "COPY")
    if src.endswith(".toml"):
        assert command in console_scripts(src), f"{path.name}: {command} is not a console script of {src}"
        pkg_dir = str(Path(src).parent)
        assert f"{pkg_dir} /src/{pkg_dir}" in copies and f"pip install --no-cache-dir /src/{pkg_dir}" in run
    else:
        assert command in requirement_commands(src), f"{path.name}: {command} is not pinned in {src}"
        assert "pip install --no-cache-dir -r /src/requirements.txt" in run
    assert "python3-venv" in run and "python3 -m venv /opt/tpcmesh" in run


def test_agent_image_installs_every_agent_debian_package_and_their_commands():
    stage = final_stage(DOCKERFILES / "agent.Dockerfile")
    run = " ".join(a for w, a in stage if w == "RUN")
    m = re.search(r"awk (-F'\\t' '[^']+') /tmp/debian-packages.txt", run)
    assert m, "agent.Dockerfile must select its packages from hack/debian-packages.txt with awk"
    selected = subprocess.run(["awk", *shlex.split(m.group(1)), str(PACKAGES)], capture_output=True, text=True,
                              check=True).stdout.split()
    expected = [p for p, _ in agent_packages()]
    assert selected == expected and expected, (selected, expected)
    for pkg, what in agent_packages():
        thing = what.split()[0].rstrip(",:")  # "xrootd (HTTP-TPC ...)" -> xrootd; "libXrdHttpTPC" -> a library
        files = dpkg_files(pkg)
        if thing.startswith("lib"):
            assert any(Path(f).name.startswith(thing) for f in files), f"{pkg} does not ship {thing}"
        else:
            assert any(re.search(rf"/s?bin/{re.escape(thing)}$", f) for f in files), f"{pkg} does not ship {thing}"


def test_chart_container_commands_exist_in_their_images():
    from tests.support.controlplane import binary

    helm = binary("helm")
    if helm is None:
        pytest.skip("helm is not built; run `make control-plane`")
    out = subprocess.run([str(helm), "template", "t", str(REPO / "charts" / "tpcmesh"), "--kube-version", "1.34.4"],
                         capture_output=True, text=True, check=True)
    checked = 0
    for doc in (d for d in yaml.safe_load_all(out.stdout) if d):
        spec = doc.get("spec", {}).get("template", {}).get("spec") or (doc.get("spec") if doc["kind"] == "Pod"
                                                                       else None)
        if not spec:
            continue
        for c in spec.get("initContainers", []) + spec.get("containers", []):
            m = re.search(r"/tpcmesh-(operator|agent|dashboard):", c["image"])
            if not m:
                continue  # PostgreSQL's own image
            command = (c.get("command") or [None])[0]
            assert command, f"{doc['kind']}/{doc['metadata']['name']} {c['name']}: no command"
            assert command in provided_commands(m.group(1)), \
                f"{doc['kind']}/{doc['metadata']['name']} container {c['name']} runs {command}, " \
                f"which Dockerfiles/{m.group(1)}.Dockerfile does not install"
            checked += 1
    assert checked >= 6


def test_no_image_contains_the_lab():
    """The lab (lab/, `tpcmesh-local`) is a developer tool: no image copies it, and the operator package (which the
    operator image installs) neither holds it nor names its command."""
    for path in sorted(DOCKERFILES.glob("*.Dockerfile")):
        for w, a in instructions(path):
            if w == "COPY":
                sources = [s for s in a.split()[:-1] if not s.startswith("--")]
                assert not any(s in (".", "lab") or s.startswith("lab/") for s in sources), f"{path.name}: COPY {a}"
    assert not (REPO / "operator" / "tpcmesh_operator" / "local").exists()
    assert "tpcmesh-local" not in console_scripts("operator/pyproject.toml")


@pytest.mark.parametrize("image", sorted(PYTHON_SOURCES))
def test_pinned_base_non_root_no_secrets(image):
    path = DOCKERFILES / f"{image}.Dockerfile"
    ins = instructions(path)
    args = dict(a.split("=", 1) for w, a in ins if w == "ARG" and "=" in a)
    for w, a in ins:
        if w == "FROM":
            ref = a.split()[0]
            ref = args.get(ref.strip("${}"), ref) if ref.startswith("$") else ref
            assert re.search(r":\d+\.\d+[-\w.]*$|@sha256:[0-9a-f]{64}$", ref), f"{path.name}: unpinned base {ref}"
    assert re.fullmatch(r"\d{8}T\d{6}Z", args.get("DEBIAN_SNAPSHOT", "")), f"{path.name}: no Debian snapshot pin"
    users = [a for w, a in final_stage(path) if w == "USER"]
    assert users and not users[-1].startswith(("0", "root")), f"{path.name}: must end as a non-root USER"
    secretish = re.compile(r"(PASSWORD|TOKEN|SECRET|PRIVATE_KEY)", re.I)
    for w, a in ins:
        if w in ("ENV", "ARG"):
            assert not secretish.search(a), f"{path.name}: {w} {a} looks like a secret baked into the image"


def test_release_workflow_pushes_the_three_images_where_the_chart_pulls_them():
    wf = yaml.safe_load((REPO / ".github" / "workflows" / "release.yaml").read_text())
    values = yaml.safe_load((REPO / "charts" / "tpcmesh" / "values.yaml").read_text())
    assert wf[True]["push"]["tags"] == ["v*"]  # YAML 1.1 reads the key `on` as True
    assert wf["env"]["REGISTRY"] == values["image"]["registry"]
    job = wf["jobs"]["images"]
    assert sorted(job["strategy"]["matrix"]["component"]) == sorted(PYTHON_SOURCES)
    build = next(s for s in job["steps"] if s.get("uses", "").startswith("docker/build-push-action"))
    assert build["with"]["file"] == "Dockerfiles/${{ matrix.component }}.Dockerfile"
    assert build["with"]["tags"] == "${{ env.REGISTRY }}/tpcmesh-${{ matrix.component }}:${{ env.VERSION }}"
    assert {values[c]["image"] for c in PYTHON_SOURCES} == {f"tpcmesh-{c}" for c in PYTHON_SOURCES}
    assert build["with"]["push"] is True and wf["permissions"]["packages"] == "write"

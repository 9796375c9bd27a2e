#!/usr/bin/env python3
"""Print the bin directory of a Go new enough to build the control plane (tests/cluster/build-control-plane.sh).

The Go on PATH is used when it is at least what the module's go.mod asks for (`go 1.24.0` for k8s.io/kubernetes
v1.34). Otherwise (Debian 12's golang-go is 1.19, too old, and only Go >= 1.21 can switch toolchains itself) the
pinned official toolchain is fetched from the Go module proxy - module golang.org/toolchain, a zip - checked
against its pinned go.sum hash (h1, the checksum database's record), unpacked into ~/.cache/tpcmesh/go/<version>
and used from there. Standard library only: it runs before the virtualenv exists.

Usage: hack/go-toolchain.py [--module k8s.io/kubernetes@v1.34.4 | --requires 1.24.0]
Environment: GOPROXY (first entry; default https://proxy.golang.org), TPCMESH_CACHE (default ~/.cache/tpcmesh),
TPCMESH_GO_TOOLCHAIN=go1.X.Y to fetch another version (its hash is then read from the checksum database through
the proxy instead of the pin).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

PINNED = "go1.24.13"
# go.sum hashes of golang.org/toolchain@v0.0.1-<PINNED>.linux-<arch> (as `go mod download` verified them against
# sum.golang.org)
PINNED_SUMS = {"amd64": "h1:5sgfUhn9QCgVl4UYj32GrIYFHI3bi2UX55tNfupXwxc="}
DEFAULT_MODULE = "k8s.io/kubernetes@v1.34.4"


class ToolchainError(RuntimeError):
    pass


def log(message: str) -> None:
    print(f"go-toolchain: {message}", file=sys.stderr)


def parse_version(text: str) -> tuple[int, ...]:
    """"go1.24.13", "1.24", "go version go1.19.8 linux/amd64" -> (1, 24, 13) / (1, 24, 0) / (1, 19, 8)."""
    m = re.search(r"(?:go)?(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        raise ToolchainError(f"cannot read a Go version from {text!r}")
    return tuple(int(x or 0) for x in m.groups())


def dotted(v: tuple[int, ...]) -> str:
    return ".".join(map(str, v))


def proxy() -> str:
    for entry in re.split(r"[,|]", os.environ.get("GOPROXY", "https://proxy.golang.org")):
        if entry.startswith(("https://", "http://")):
            return entry.rstrip("/")
    raise ToolchainError(f"GOPROXY={os.environ.get('GOPROXY')!r} names no proxy to fetch from")


def fetch(url: str, dest: Path | None = None) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            if dest is None:
                return r.read()
            with open(dest, "wb") as f:
                shutil.copyfileobj(r, f, 1 << 20)
            return b""
    except (urllib.error.URLError, OSError) as e:
        raise ToolchainError(f"cannot fetch {url}: {e}") from None


def required_version(module: str, cache: Path) -> tuple[int, ...]:
    """The `go` directive of module@version's go.mod (cached beside the toolchains)."""
    path, _, version = module.partition("@")
    saved = cache / "go" / "mod" / f"{path.replace('/', '_')}@{version}.mod"
    if saved.is_file():
        text = saved.read_text()
    else:
        text = fetch(f"{proxy()}/{path}/@v/{version}.mod").decode()
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_text(text)
    m = re.search(r"^go\s+(\S+)", text, re.M)
    if not m:
        raise ToolchainError(f"{module}'s go.mod has no go directive")
    return parse_version(m.group(1))


def version_of(go: str) -> tuple[int, ...] | None:
    try:
        out = subprocess.run([go, "version"], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "GOTOOLCHAIN": "local"})
    except OSError:
        return None
    return parse_version(out.stdout) if out.returncode == 0 and "go version" in out.stdout else None


def hash1(zip_path: Path) -> str:
    """Go's dirhash.HashZip: h1 = base64(sha256 of the lines "<sha256 hex>  <name>\\n", names sorted)."""
    lines = []
    with zipfile.ZipFile(zip_path) as z:
        for name in sorted(z.namelist()):
            if "\n" in name:
                raise ToolchainError(f"{zip_path}: a file name holds a newline")
            with z.open(name) as f:
                h = hashlib.sha256()
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            lines.append(f"{h.hexdigest()}  {name}\n")
    return "h1:" + base64.b64encode(hashlib.sha256("".join(lines).encode()).digest()).decode()


def arch() -> str:
    machine = platform.machine().lower()
    found = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine)
    if not found:
        raise ToolchainError(f"no official Go toolchain for this machine ({machine})")
    return found


def expected_sum(module_version: str, version: str, goarch: str) -> str:
    if version == PINNED and goarch in PINNED_SUMS:
        return PINNED_SUMS[goarch]
    record = fetch(f"{proxy()}/sumdb/sum.golang.org/lookup/golang.org/toolchain@{module_version}").decode()
    m = re.search(rf"^golang\.org/toolchain {re.escape(module_version)} (h1:\S+)$", record, re.M)
    if not m:
        raise ToolchainError(f"the checksum database has no record of golang.org/toolchain@{module_version}")
    return m.group(1)


def install(version: str, cache: Path) -> Path:
    """The toolchain's bin directory under cache/go/<version>, fetched and checked when missing."""
    goroot = cache / "go" / version
    go = goroot / "bin" / "go"
    if version_of(str(go)) == parse_version(version):
        return go.parent
    goarch = arch()
    module_version = f"v0.0.1-{version}.linux-{goarch}"
    want = expected_sum(module_version, version, goarch)
    (cache / "go").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache / "go", prefix=".fetch-") as tmp:
        zip_path = Path(tmp) / "toolchain.zip"
        url = f"{proxy()}/golang.org/toolchain/@v/{module_version}.zip"
        log(f"fetching {url}")
        fetch(url, zip_path)
        got = hash1(zip_path)
        if got != want:
            raise ToolchainError(f"golang.org/toolchain@{module_version}: hash {got} is not the recorded {want}")
        prefix = f"golang.org/toolchain@{module_version}/"
        unpacked = Path(tmp) / "go"
        with zipfile.ZipFile(zip_path) as z:
            for info in z.infolist():
                if not info.filename.startswith(prefix) or ".." in info.filename.split("/"):
                    raise ToolchainError(f"unexpected entry {info.filename!r} in the toolchain zip")
                target = unpacked / info.filename[len(prefix):]
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
        # Module zips keep no file modes: as `go` does after a toolchain download, make the commands executable.
        for d in [unpacked / "bin", *(unpacked / "pkg" / "tool").glob("*")]:
            for f in d.iterdir() if d.is_dir() else []:
                if f.is_file():
                    f.chmod(0o755)
        if goroot.exists():
            shutil.rmtree(goroot)
        unpacked.rename(goroot)
    found = version_of(str(go))
    if found != parse_version(version):
        raise ToolchainError(f"{go} does not run after unpacking (it reports {found})")
    log(f"installed {version} in {goroot}")
    return go.parent


def choose(required: tuple[int, ...], cache: Path) -> Path:
    on_path = shutil.which("go")
    if on_path:
        have = version_of(on_path)
        if have is not None and have >= required:
            return Path(on_path).resolve().parent
        log(f"{on_path} is go{dotted(have) if have else '?'}, older than the go{dotted(required)} required: "
            "using the official toolchain instead")
    version = os.environ.get("TPCMESH_GO_TOOLCHAIN", PINNED)
    if parse_version(version) < required:
        raise ToolchainError(f"the toolchain {version} is older than the go{dotted(required)} required: set a newer "
                             "one in hack/go-toolchain.py (PINNED, PINNED_SUMS) or TPCMESH_GO_TOOLCHAIN")
    return install(version, cache)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--module", default=DEFAULT_MODULE, help="module@version whose go.mod sets the minimum")
    group.add_argument("--requires", help="the minimum Go version itself, e.g. 1.24.0")
    args = parser.parse_args(argv)
    cache = Path(os.environ.get("TPCMESH_CACHE") or Path.home() / ".cache" / "tpcmesh")
    try:
        required = parse_version(args.requires) if args.requires else required_version(args.module, cache)
        print(choose(required, cache))
    except ToolchainError as e:
        log(str(e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The implementations' versions (agent versions.py): parsed from what the real programs print, here and now (each
skipped when its program is missing), and unknown (None), never an error, for anything else."""

from __future__ import annotations

import re
import shutil
import subprocess
from datetime import timedelta
from importlib import metadata

import pytest
from tpcmesh_agent import records, versions

from tests.unit.agent.test_agent_records import T0, _job, _res, validator

# each program's own words, as this machine's program prints them, and what the version in them looks like
LIVE = {
    "xrootd": (["xrootd", "-v"], r"^v(\d+\.\d+\.\d+)\s*$"),
    "xrdcp": (["xrdcp", "--version"], r"^v(\d+\.\d+\.\d+)\s*$"),
    "globus-gridftp-server": (["globus-gridftp-server", "-version"], r"^globus_gridftp_server: (\d+\.\d+) \("),
    "globus-url-copy": (["globus-url-copy", "-version"], r"^globus-url-copy: (\d+\.\d+)\s*$"),
    "iperf3": (["iperf3", "--version"], r"^iperf (\d+\.\d+)"),
}


@pytest.mark.parametrize("name", sorted(LIVE))
def test_each_program_version_is_parsed_from_its_live_output(name):
    argv, pattern = LIVE[name]
    if shutil.which(argv[0]) is None:
        pytest.skip(f"{argv[0]} is not installed")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    said = re.search(pattern, out.stdout + out.stderr, re.MULTILINE)
    assert said, f"{argv} printed {out.stdout!r} {out.stderr!r}"
    assert versions.program_version(name) == said.group(1)
    assert versions.local_versions()[name] == said.group(1)


def test_the_agent_version_is_the_installed_package_s():
    assert versions.agent_version() == metadata.version("tpcmesh-agent")
    assert versions.local_versions()["tpcmesh-agent"] == versions.agent_version()


@pytest.mark.parametrize(("parse", "text", "want"), [
    (versions.parse_xrootd, "v5.5.3\n", "5.5.3"),
    (versions.parse_xrootd, "v5.6.0-rc1\n", "5.6.0-rc1"),
    (versions.parse_xrootd, "[] / > Goodbye.\n", None),  # xrdfs --version says nothing of itself
    (versions.parse_gridftp_server, "globus_gridftp_server: 12.2 (1592828472-1)\n", "12.2"),
    (versions.parse_iperf3, "iperf 3.12 (cJSON 1.7.15)\nLinux vm 6.1.0 #1 SMP x86_64\n", "3.12"),
    (versions.parse_iperf3, "iperf 3.9+ (cJSON 1.7.13)\n", "3.9+"),
    (versions.parse_globus_url_copy, "globus-url-copy: 10.12\n", "10.12"),
    (versions.parse_gridftp_banner,
     b"220 vm GridFTP Server 13.24 (gcc64, 1653033972-1) [Grid Community Toolkit 6.2] ready.\r\n", "13.24"),
    (versions.parse_gridftp_banner, b"220 ftp.example.org FTP server ready.\r\n", None),  # banner hidden
    (versions.parse_agent_server, "tpcmesh-agent/0.1.0 Python/3.11.2", "0.1.0"),
    (versions.parse_agent_server, "BaseHTTP/0.6 Python/3.11.2", None),
    (versions.parse_xrootd, "v" + "1." * 40 + "1\n", None),  # longer than the contract allows
    (versions.parse_xrootd, b"\xff\xfe garbage", None),
    (versions.parse_xrootd, None, None),
])
def test_parsers_take_a_version_or_nothing(parse, text, want):
    assert parse(text) == want


def test_a_missing_hanging_or_silent_program_is_unknown(monkeypatch):
    monkeypatch.setitem(versions.PROGRAMS, "xrootd", (["/nonexistent/xrootd", "-v"], versions.parse_xrootd))
    monkeypatch.setitem(versions.PROGRAMS, "iperf3", (["sleep", "30"], versions.parse_iperf3))
    monkeypatch.setitem(versions.PROGRAMS, "globus-gridftp-server", (["true"], versions.parse_gridftp_server))
    found = versions.local_versions(timeout=0.5)
    assert found["xrootd"] is None and found["iperf3"] is None and found["globus-gridftp-server"] is None


def test_a_record_carries_its_implementation_and_validates():
    impl = versions.implementation("xrootd", {"xrootd": "5.5.3", "tpcmesh-agent": "0.1.0"}, "5.5.2")
    assert impl == {"name": "xrootd", "version": "5.5.3", "peer_version": "5.5.2", "agent_version": "0.1.0"}
    end = T0 + timedelta(seconds=2)
    rec = records.build_record(_job(1, 10), [_res("f0", 10, 0, 1)], T0, end, "succeeded", implementation=impl)
    assert rec["implementation"] == impl
    validator().validate(rec)
    unknown = versions.implementation("iperf3", {"tpcmesh-agent": "0.1.0"}, None)
    rec = records.build_record(_job(1, 10), [_res("f0", 10, 0, 1)], T0, end, "succeeded", implementation=unknown)
    validator().validate(rec)
    assert "implementation" not in records.build_record(_job(1, 10), [_res("f0", 10, 0, 1)], T0, end, "succeeded")
    bad = {**impl, "version": "5.5.3; rm -rf /"}
    with pytest.raises(Exception, match="does not match"):
        validator().validate({**rec, "implementation": bad})

"""write_atomically: a reader sees the old file or the new one, never a truncated one; unchanged files stay put."""

from __future__ import annotations

import os
import stat

from tpcmesh_agent.atomic import write_atomically


def test_replaces_in_one_rename_with_the_mode(tmp_path) -> None:
    path = tmp_path / "hostkey.pem"
    assert write_atomically(path, b"old", 0o600)
    held = open(path, "rb")  # a server that opened the old file keeps reading the old bytes
    assert write_atomically(path, b"new key", 0o600)
    assert held.read() == b"old"
    held.close()
    assert path.read_bytes() == b"new key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["hostkey.pem"]  # no temporary left behind


def test_an_unchanged_file_is_not_rewritten(tmp_path) -> None:
    path = tmp_path / "ca.pem"
    write_atomically(path, b"pem")
    inode = path.stat().st_ino
    seen: list[str] = []
    assert write_atomically(path, b"pem", prepare=lambda p: seen.append(p.name)) is False
    assert path.stat().st_ino == inode and seen == []
    assert write_atomically(path, b"pem2", prepare=lambda p: seen.append(p.name))
    assert seen == [".ca.pem.tmp"] and path.stat().st_ino != inode
    assert os.access(path, os.R_OK)

"""Pure helpers of the built-in mover: byte ranges per stream and the RFC 3230 Digest header."""

from __future__ import annotations

import pytest
from tpcmesh_agent.movers.builtin import digest_checksum, split_ranges


@pytest.mark.parametrize("size, streams", [(10, 1), (10, 3), (2_000_003, 8), (5, 8), (1, 100), (2**30, 100)])
def test_ranges_cover_the_file_once_in_order(size, streams):
    ranges = split_ranges(size, streams)
    assert len(ranges) == min(streams, size)
    assert ranges[0][0] == 0 and ranges[-1][1] == size
    assert all(a < b for a, b in ranges)
    assert all(ranges[i][1] == ranges[i + 1][0] for i in range(len(ranges) - 1))


def test_empty_file_is_one_empty_range():
    assert split_ranges(0, 8) == [(0, 0)]


@pytest.mark.parametrize("header, expected", [
    ("adler32=0a1b2c3d", "adler32:0a1b2c3d"),
    ("ADLER32=A1B2C3D", "adler32:0a1b2c3d"),
    ("md5=abc, adler32=1", "adler32:00000001"),
    ("md5=abc", None),
    ("adler32=xyz", None),
    ("", None),
    (None, None),
])
def test_digest_header(header, expected):
    assert digest_checksum(header) == expected

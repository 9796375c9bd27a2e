"""Test-file sets: names, datasets, deterministic content, manifest reuse, budget refusal before writing."""

from __future__ import annotations

import zlib

import pytest
from tpcmesh_agent import files
from tpcmesh_agent.files import BudgetExceeded, FileSetError, FileSets


def test_default_set_is_eleven_si_gigabytes():
    spec = files.spec_from_request({})
    assert spec.name == "11x1000000000" and len(spec.files) == 11 and spec.total_bytes == 11 * 10**9


def test_named_datasets_are_powers_of_two():
    small, medium, large = (files.spec_from_request({"dataset": d}) for d in ("small", "medium", "large"))
    assert [s for _, s in small.files] == [8 * 1024 * 2**i for i in range(10)]  # 8 KiB .. 4 MiB
    assert small.files[0][1] == 8192 and small.files[-1][1] == 4 * 2**20
    assert medium.files[0][1] == 8 * 2**20 and medium.files[-1][1] == 2**30
    assert [s for _, s in large.files] == [2 * 2**30, 4 * 2**30, 8 * 2**30]
    assert small.file_size is None and files.spec_from_request({"count": 2, "size": 5}).file_size == 5
    assert files.spec_from_name("small") == small
    assert files.spec_from_name("3x100") == files.spec_from_request({"count": 3, "size": 100})


@pytest.mark.parametrize("body, words", [
    ({"count": -1, "size": 10}, "file_set.count -1 is out of range"),
    ({"count": 1, "size": 0}, "file_set.size 0 is out of range"),
    ({"count": 1, "size": 10**15}, "file_set.size 1000000000000000 is out of range"),
    ({"count": 10**6, "size": 1}, "file_set.count 1000000 is out of range"),
    ({"count": "3", "size": 1}, "file_set.count must be an integer"),
    ({"count": True, "size": 1}, "file_set.count must be an integer"),
    ({"dataset": "huge"}, "file_set.dataset 'huge' is unknown"),
    ({"dataset": "small", "count": 2}, "either dataset or count+size"),
    ({"count": 1, "size": 1, "colour": "red"}, "unknown keys ['colour']"),
])
def test_bad_set_descriptions_name_the_field(body, words):
    with pytest.raises(FileSetError, match=None) as e:
        files.spec_from_request(body)
    assert words in str(e.value)


@pytest.mark.parametrize("name", ["../etc", "a/b", "..", ".", "", "x" * 201, "a b", "ok..no", "é"])
def test_file_names_are_validated(name):
    with pytest.raises(FileSetError, match="invalid"):
        files.validate_name(name)


def test_valid_names_pass():
    assert files.validate_name("file-0001.dat") == "file-0001.dat"
    with pytest.raises(FileSetError):
        files.spec_from_name("../x")


def test_content_is_deterministic_and_checksum_matches(tmp_path):
    a, b = FileSets(tmp_path / "a", 10**9), FileSets(tmp_path / "b", 10**9)
    spec = files.spec_from_request({"count": 3, "size": 5 * 2**20 + 7})  # crosses the 4 MiB chunk
    ea, eb = a.ensure(spec), b.ensure(spec)
    assert ea == eb
    for e in ea:
        data = (a.path(spec.name) / e.name).read_bytes()
        assert len(data) == e.size
        assert e.checksum == f"adler32:{zlib.adler32(data):08x}"
        assert data == (b.path(spec.name) / e.name).read_bytes()
    first = (a.path(spec.name) / ea[0].name).read_bytes()
    assert first[:4 * 2**20] != first[4 * 2**20:8 * 2**20].ljust(4 * 2**20, b"\0")  # chunks differ
    assert len({e.checksum for e in ea}) == 3  # files differ


def test_reuse_verifies_and_recreates_a_damaged_set(tmp_path):
    fs = FileSets(tmp_path, 10**9)
    spec = files.spec_from_request({"count": 2, "size": 1000})
    entries = fs.ensure(spec)
    p = fs.path(spec.name) / entries[0].name
    mtime = p.stat().st_mtime_ns
    assert fs.ensure(spec) == entries and p.stat().st_mtime_ns == mtime  # reused, not rewritten
    p.write_bytes(b"x" * 1000)  # same size, wrong content: only a checksum check sees it
    assert fs.ensure(spec) == entries and p.read_bytes() == b"x" * 1000
    assert fs.ensure(spec, verify_checksums=True) == entries
    assert files.adler32_of(p) == entries[0].checksum
    p.write_bytes(b"short")
    assert fs.ensure(spec) == entries and p.stat().st_size == 1000
    assert fs.list() == [spec.name]


def test_first_reuse_after_a_restart_verifies_checksums(tmp_path):
    """A new FileSets (an agent started again) checks every checksum of a set it is asked for the first time: the
    files may have changed while no agent watched them. After that, sizes only, unless asked."""
    spec = files.spec_from_request({"count": 2, "size": 1000})
    entries = FileSets(tmp_path, 10**9).ensure(spec)
    p = tmp_path / spec.name / entries[1].name
    p.write_bytes(b"y" * 1000)  # same size, other content
    restarted = FileSets(tmp_path, 10**9)
    assert restarted.ensure(spec) == entries
    assert files.adler32_of(p) == entries[1].checksum  # rewritten
    p.write_bytes(b"y" * 1000)
    assert restarted.ensure(spec) == entries and p.read_bytes() == b"y" * 1000  # checked once per start
    assert restarted.ensure(spec, verify_checksums=True) == entries and files.adler32_of(p) == entries[1].checksum


def test_two_sets_cannot_both_take_the_last_room(tmp_path):
    """The budget check of a set counts a set still being written in full: started together, two sets that fit
    only one at a time are not both accepted."""
    import threading

    fs = FileSets(tmp_path / "sets", 25 * 10**6)
    first = files.spec_from_request({"count": 1, "size": 10**7})  # 10 MB + 10 MB to receive: fits alone
    second = files.spec_from_request({"count": 1, "size": 10**7 + 1})
    gate = threading.Event()
    original = files.write_file

    def slow_write(*args, **kw):  # the first set is still being written when the second one is checked
        gate.wait(10)
        return original(*args, **kw)

    files.write_file, outcome = slow_write, {}
    try:
        t = threading.Thread(target=lambda: outcome.setdefault("first", fs.ensure(first)))
        t.start()
        while first.name not in fs._writing:
            threading.Event().wait(0.01)
        with pytest.raises(BudgetExceeded, match="other sets hold 10000000 bytes"):
            fs.ensure(second)
        assert fs.held_bytes() == 10**7
    finally:
        gate.set()
        t.join(10)
        files.write_file = original
    assert outcome["first"] and fs.list() == [first.name]


def test_budget_refuses_before_writing(tmp_path):
    fs = FileSets(tmp_path / "sets", 10_000)
    with pytest.raises(BudgetExceeded, match="exceed the budget of 10000 bytes"):
        fs.ensure(files.spec_from_request({"count": 2, "size": 3000}))  # 6000 + 6000 to receive
    assert not (tmp_path / "sets").exists() or not any((tmp_path / "sets").iterdir())
    fs.ensure(files.spec_from_request({"count": 1, "size": 4000}))
    fs.ensure(files.spec_from_request({"count": 1, "size": 2000}))  # 4000 (+ manifest) + 2 * 2000 fits
    with pytest.raises(BudgetExceeded, match=r"other sets hold 6\d{3} bytes"):
        fs.ensure(files.spec_from_request({"count": 1, "size": 1999}))
    assert fs.list() == ["1x2000", "1x4000"]
    fs.remove("1x2000")
    assert fs.remove("1x4000") and fs.list() == []


def test_refused_when_the_filesystem_has_less_room_than_the_budget(tmp_path):
    import shutil

    free = shutil.disk_usage(tmp_path).free
    fs = FileSets(tmp_path / "sets", 10**18)  # a budget far beyond the filesystem
    count = free // (2 * 10**9) + 1  # 1 GB files: the set would fit alone, not with room to receive it
    with pytest.raises(BudgetExceeded, match="bytes are free on the filesystem of"):
        fs.ensure(files.spec_from_request({"count": count, "size": 10**9}))
    assert not (tmp_path / "sets").exists()

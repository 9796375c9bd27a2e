"""CSV output: cells (null, nested, formula-looking text), chunked lines, the trailer only when cut short."""

import csv
import io

from results.api.renderers import CSVRenderer, csv_cell, csv_lines


def test_csv_cell():
    assert csv_cell(None) == "" and csv_cell(1.5) == 1.5 and csv_cell(-2) == -2
    assert csv_cell({"a": [1, 2]}) == '{"a":[1,2]}'
    for text in ["=1+1", "+1", "-1", "@A1", "\tx", "\rx"]:
        assert csv_cell(text) == "'" + text
    assert csv_cell("a=1") == "a=1" and csv_cell("") == ""


def parse(chunks) -> list[list[str]]:
    return list(csv.reader(io.StringIO("".join(chunks))))


def test_csv_lines_limit_and_trailer():
    rows = [{"n": i, "s": f"=x{i}"} for i in range(1200)]
    chunks = list(csv_lines(["n", "s"], iter(rows), 1200, "# cut\n"))
    assert len(chunks) > 2  # streamed in pieces, not one string
    out = parse(chunks)
    assert out[0] == ["n", "s"] and len(out) == 1201 and out[-1] == ["1199", "'=x1199"]
    cut = parse(csv_lines(["n", "s"], iter(rows), 10, "# cut\n"))
    assert len(cut) == 12 and cut[-1] == ["# cut"]
    assert parse(csv_lines(["n"], iter([]), 10, "# cut\n")) == [["n"]]


def test_renderer_for_one_document():
    text = CSVRenderer().render({"id": 1, "error": "=boom", "files": [{"name": "f"}]}).decode()
    assert parse([text]) == [["id", "error", "files"], ["1", "'=boom", '[{"name":"f"}]']]

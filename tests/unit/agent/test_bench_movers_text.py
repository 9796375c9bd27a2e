"""The bench-movers report's reading of the store goal against cp's spread (pure text from measured figures)."""

from __future__ import annotations

import importlib.util
import sys

from tests.support.paths import REPO


def _movers():
    spec = importlib.util.spec_from_file_location("bench_movers", REPO / "agent" / "bench" / "movers.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_store_is_also_read_against_the_fastest_cp_sample():
    movers = _movers()
    # cp at 11 files swung 4.6-14.4 Gbit/s: 11.25 beats its median (9.9) but not 0.9 x its best
    text = "".join(movers.against_fastest_cp({1: [10.0, 12.5], 11: [4.61, 9.92, 14.43]},
                                             [(12.0, 1, 1), (11.25, 8, 11)]))
    assert "1 file(s) at once 10.00-12.50 Gbit/s; 11 file(s) at once 4.61-14.43 Gbit/s" in text
    assert "1 stream(s) × 1: 0.96 × cp; 8 stream(s) × 11: 0.78 × cp." in text
    assert "1 of 2 store cases stay below 0.9 × cp" in text


def test_nothing_is_said_without_cp_samples_and_no_warning_when_store_keeps_up():
    movers = _movers()
    assert movers.against_fastest_cp({1: [], 11: []}, [(12.0, 1, 1)]) == []
    text = "".join(movers.against_fastest_cp({1: [10.0]}, [(9.5, 1, 1)]))
    assert "0.95 × cp" in text and "below" not in text


def _auth():
    _movers()  # puts agent/bench on sys.path
    import movers_auth

    return movers_auth


def test_the_authorization_rows_give_agent_over_by_hand_token_over_x509_and_each_over_none():
    auth = _auth()
    bench = auth.AuthBench(10**8, 1, print, api=None)
    case = bench.cases.setdefault((8, 1), auth.AuthCase(8, 1))
    case.samples = {("token", "agent"): [2.0, 1.8, None], ("token", "curl"): [2.0], ("x509", "agent"): [2.5],
                    ("x509", "curl"): [2.4], ("none", "curl"): [2.5, 2.4, 2.6]}
    bench.cases[(8, 11)] = auth.AuthCase(8, 11, refused="this test needs up to 22.1 GB")
    text = bench.section("header")
    assert "| token | 8 | 1 | 1.90 | 2.00 | 0.95 | 0.76 | 0.80 | 1.80-2.00; – |" in text  # median of the finished
    assert "| x509 | 8 | 1 | 2.50 | 2.40 | 1.04 | – | 0.96 | –; – |" in text
    # none: no agent-driven figure (no agent runs an anonymous landing), by hand only
    assert "| none | 8 | 1 | – | 2.50 | – | – | – | –; 2.40-2.60 |" in text
    assert "| token, x509 and none | 8 | 11 | refused¹ |" in text and "“this test needs up to 22.1 GB”" in text
    assert "met in 2 of 2 cases (token 8×1: 0.95; x509 8×1: 1.04)" in text
    # 0.8 Gbit by hand: 0.4 s at 2.0 Gbit/s, 0.32 s at 2.5: token adds 80 ms; x509 at 2.4: 13 ms
    assert "token 8×1: 0.80 (+80 ms); x509 8×1: 0.96 (+13 ms)." in text
    assert text.startswith(auth.START) and text.endswith(auth.END)


def test_without_none_figures_no_cost_of_authorization_is_claimed():
    auth = _auth()
    bench = auth.AuthBench(10**8, 1, print, api=None)
    bench.cases[(1, 1)] = auth.AuthCase(1, 1, samples={("token", "agent"): [2.0], ("token", "curl"): [2.0],
                                                       ("none", "curl"): [None]})
    text = bench.section("header")
    assert "| none | 1 | 1 | – | failed | – | – | – | –; – |" in text
    assert "| token | 1 | 1 | 2.00 | 2.00 | 1.00 | – | – |" in text
    assert "no cost of authorization" in text and "Cost of authorization per case" not in text

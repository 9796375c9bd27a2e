"""The clock's sync state from adjtimex, the probe's configuration and the summaries' outbox."""

from __future__ import annotations

import ctypes

import pytest
from tpcmesh_agent.twamp import clock
from tpcmesh_agent.twamp.outbox import Outbox
from tpcmesh_agent.twamp.service import ConfigError, parse_config


def test_struct_timex_has_the_kernels_size():
    assert ctypes.sizeof(clock.Timex) == (208 if ctypes.sizeof(ctypes.c_long) == 8 else 128)


def test_adjtimex_is_read():
    state = clock.read_clock()
    assert state.source == "adjtimex"
    assert state.esterror_s >= 0 and state.maxerror_s >= state.esterror_s


@pytest.mark.parametrize(("ret", "status", "synced"), [(0, 0x2001, True), (5, 0x2001, False),
                                                       (0, 0x0041, False)])
def test_sync_state_from_the_return_value_and_status(ret, status, synced):
    state = clock.interpret(ret, status, 250, 1000)
    assert state.synchronized is synced and state.esterror_s == 0.00025 and state.maxerror_s == 0.001


def test_outbox_hands_out_batches_until_acknowledged():
    box = Outbox(capacity=5)
    ids = [box.put({"n": i}) for i in range(3)]
    assert [x["id"] for x in box.batch(2)] == ids[:2]
    assert [x["id"] for x in box.batch(2)] == ids[:2]  # not acknowledged: the same batch again
    assert box.ack(ids[0]) == 1
    assert [x["n"] for x in box.batch(10)] == [1, 2]
    assert box.ack(ids[0]) == 0  # acknowledging again is harmless


def test_outbox_is_bounded_and_counts_what_it_dropped():
    box = Outbox(capacity=3)
    for i in range(5):
        box.put({"n": i})
    assert [x["n"] for x in box.batch(10)] == [2, 3, 4]
    assert box.status()["dropped"] == 2 and box.status()["pending"] == 3


def test_config_defaults_and_errors():
    config, peers, external, senders = parse_config({"peers": [{"name": "b", "address": "2001:db8::1"}]})
    assert (config.rate_pps, config.period_s, config.padding, peers[0].port, external, senders) == \
        (10.0, 60.0, 27, 863, [], frozenset())
    for body, message in [
        ({"padding": 10}, "cannot be reflected"),
        ({"rate_pps": 0}, "rate_pps"),
        ({"dscp": 64}, "dscp"),
        ({"peers": [{"name": "x", "address": "nowhere"}]}, "not an IP address"),
        ({"peers": [{"name": "x", "address": "192.0.2.1", "port": 0}]}, "port"),
        ({"speed": 1}, "unknown field"),
        ({"padding": 27.5}, "padding must be a number"),
        ({"allowed_senders": ["192.0.2.1", 7]}, "allowed_senders"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_config(body)


def test_outbox_is_saved_and_loaded_with_its_ids(tmp_path):
    path = tmp_path / "outbox.json"
    box = Outbox(capacity=10)
    for i in range(4):
        box.put({"n": i})
    box.ack(1)
    box.save(path)
    again = Outbox(capacity=2)  # a smaller outbox keeps the newest and counts the rest as dropped
    assert again.load(path) == 2 and not path.exists()
    assert [(x["id"], x["n"]) for x in again.batch(10)] == [(3, 2), (4, 3)]
    assert again.status()["dropped"] == 1
    assert again.put({"n": 4}) == 5  # ids go on where the saved outbox stopped
    assert Outbox().load(path) == 0  # nothing saved: nothing loaded
    path.write_text("{not json")
    assert Outbox().load(path) == 0 and path.exists()  # an unreadable file is left for a person

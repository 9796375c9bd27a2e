"""The clock's sync state from adjtimex, the probe's configuration and the summaries' outbox."""

from __future__ import annotations

import asyncio
import ctypes
import socket

import pytest
from tpcmesh_agent.twamp import clock, udp
from tpcmesh_agent.twamp.outbox import Outbox
from tpcmesh_agent.twamp.sender import Peer, ProbeConfig, Sender
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


def test_a_packet_counts_in_the_period_it_is_due_in_not_the_one_it_leaves_in():
    """The loop sends packets up to BATCH_S early and wakes late; a full period at 50/s holds exactly 50."""
    summaries: list[dict] = []
    unsynced = clock.ClockState(synchronized=False, esterror_s=float("inf"), maxerror_s=float("inf"), source="test")
    sender = Sender(["127.0.0.1"], ProbeConfig(rate_pps=50, period_s=1, loss_timeout_s=0.5), summaries.append,
                    clock=lambda: unsynced)
    sink = udp.open_socket("127.0.0.1", 0)
    sender.sockets[socket.AF_INET] = udp.open_socket("127.0.0.1", 0)
    try:
        sender.set_peers([Peer("sink", "127.0.0.1", sink.getsockname()[1])])
        st = next(iter(sender.peers.values()))
        sender._periods(99.99)  # opened before the first period [100, 101) so that one is full
        for k in range(49):  # due 100.0005 … 100.9605
            sender._send_due(st, 100.0005 + 0.02 * k)
        sender._periods(101.0003)  # a late wake-up: the loop crossed the boundary before the 50th went
        sender._send_due(st, 100.9805)
        sender._send_due(st, 101.0005)
        for k in range(1, 50):  # the next period's, the first of them sent early at 101.9995
            sender._send_due(st, 101.0005 + 0.02 * k)
        sender._send_due(st, 102.0005)  # due in [102, 103), sent before the loop saw 102
        sender._periods(102.6)
    finally:
        sink.close()
        sender.sockets[socket.AF_INET].close()
    assert [(s["period_start"][-10:], s["sent"], s["partial"]) for s in summaries] == [
        ("01:40.000Z", 50, False), ("01:41.000Z", 50, False)]


def test_a_preempted_clock_read_does_not_move_a_packet_into_the_next_period(monkeypatch):
    """On a loaded machine the loop can be preempted between its monotonic and wall-clock reads. Here every wall
    read in the last 20 ms of one period comes 20 ms late: the packet due then must still count in that period,
    and every full period at 50/s holds exactly 50 (the period it left had 49 and the next 51)."""
    import math
    import time as real
    import types

    from tpcmesh_agent.twamp import sender as sender_module

    boundary = math.ceil(real.time()) + 1.0  # the end of the first full period

    def late_wall() -> float:
        now = real.time()
        return now + 0.02 if boundary - 0.02 <= now < boundary else now

    monkeypatch.setattr(sender_module, "time", types.SimpleNamespace(
        monotonic=real.monotonic, time=late_wall, time_ns=real.time_ns))
    summaries: list[dict] = []
    unsynced = clock.ClockState(synchronized=False, esterror_s=float("inf"), maxerror_s=float("inf"), source="test")

    async def probe() -> None:
        sender = Sender(["127.0.0.1"], ProbeConfig(rate_pps=50, period_s=1, loss_timeout_s=0.2), summaries.append,
                        clock=lambda: unsynced)
        sink = udp.open_socket("127.0.0.1", 0)
        sender.start()
        try:
            sender.set_peers([Peer("sink", "127.0.0.1", sink.getsockname()[1])])
            while len([s for s in summaries if not s["partial"]]) < 2 and real.time() < boundary + 4:
                await asyncio.sleep(0.05)
        finally:
            await sender.stop()
            sink.close()

    asyncio.run(probe())
    full = [(s["period_start"], s["sent"]) for s in summaries if not s["partial"]]
    assert len(full) == 2 and {sent for _, sent in full} == {50}, summaries

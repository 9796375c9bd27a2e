"""The TWAMP-light codec: round trips, the RFC's sizes and byte positions, error estimates, NTP time, and a fuzzed
parser (any bytes: a packet or a ParseError, never another exception)."""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tpcmesh_agent.twamp import codec
from tpcmesh_agent.twamp.codec import ErrorEstimate, ParseError


def test_sender_packet_layout_is_the_rfcs():
    err = ErrorEstimate(synchronized=True, scale=10, multiplier=3)
    data = codec.build_sender(7, 0x0102030405060708, err, padding=27)
    assert len(data) == 41
    assert data[:4] == b"\x00\x00\x00\x07"
    assert data[4:12] == bytes(range(1, 9))
    assert data[12:14] == bytes([0x80 | 10, 3])  # S bit, Z 0, scale 10; multiplier 3
    assert data[14:] == bytes(27)
    assert codec.parse_sender(data) == codec.SenderPacket(7, 0x0102030405060708, err, bytes(27))
    assert codec.build_sender(7, 1, err, padding=b"xyz")[14:] == b"xyz"


def test_reflector_packet_round_trip_and_positions():
    err = ErrorEstimate(True, 5, 9)
    pkt = codec.ReflectorPacket(1, 2, err, 3, 4, 5, ErrorEstimate(False, 1, 1), 64, b"xyz")
    data = pkt.build()
    assert len(data) == 44
    assert struct.unpack("!I", data[24:28])[0] == 4 and data[40] == 64
    assert data[14:16] == data[38:40] == b"\x00\x00"
    assert codec.parse_reflector(data) == pkt


def test_a_reply_is_as_large_as_its_request_and_never_larger():
    request = codec.parse_sender(codec.build_sender(1, 2, codec.UNKNOWN_ERROR, padding=100))
    reply = codec.reflect(request, 114, sequence=0, receive_timestamp=3, timestamp=4, error=codec.UNKNOWN_ERROR,
                          ttl=60)
    assert len(reply) == 114
    parsed = codec.parse_reflector(reply)
    assert (parsed.sender_sequence, parsed.sender_timestamp, parsed.sender_ttl) == (1, 2, 60)
    short = codec.parse_sender(codec.build_sender(1, 2, codec.UNKNOWN_ERROR, padding=26))
    with pytest.raises(ParseError, match="cannot be reflected"):
        codec.reflect(short, 40, sequence=0, receive_timestamp=3, timestamp=4, error=codec.UNKNOWN_ERROR, ttl=1)


@pytest.mark.parametrize("n", [0, 1, 13])
def test_truncated_sender_packets_are_parse_errors(n):
    with pytest.raises(ParseError, match="at least 14 bytes"):
        codec.parse_sender(bytes(n))


def test_truncated_and_nonzero_mbz_reflector_packets_are_parse_errors():
    with pytest.raises(ParseError, match="at least 41 bytes"):
        codec.parse_reflector(bytes(40))
    bad = bytearray(41)
    bad[15] = 1
    with pytest.raises(ParseError, match="MBZ"):
        codec.parse_reflector(bytes(bad))


@pytest.mark.parametrize("seconds", [2**-32, 1e-6, 3.7e-4, 0.001, 0.5, 16.0, 1e6])
def test_error_estimate_encodes_a_bound_not_below_the_error(seconds):
    e = ErrorEstimate.from_seconds(seconds, True)
    assert 1 <= e.multiplier <= 255 and 0 <= e.scale <= 63
    assert e.seconds >= seconds
    assert e.seconds <= seconds * 1.01 + 2**-32 * 2**e.scale  # the smallest encodable one at that scale
    assert ErrorEstimate.unpack(e.pack()) == e


def test_a_zero_multiplier_is_an_unknown_error():
    assert ErrorEstimate.unpack(0x8000).seconds == math.inf


def test_ntp_time():
    assert codec.to_ntp(0.0) == 2_208_988_800 << 32
    assert codec.from_ntp(codec.to_ntp(1_700_000_000.25)) == 1_700_000_000.25
    ns = 1_764_287_000_123_456_789
    assert abs(codec.from_ntp(codec.to_ntp_ns(ns)) - ns / 1e9) < 1e-6
    # 2036-02-07 is where era 0 ends: a small seconds field is the next era
    assert codec.from_ntp(5 << 32) == 2**32 + 5 - codec.NTP_UNIX_OFFSET


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=200))
def test_fuzzed_parsers_answer_a_packet_or_a_parse_error(data):
    for parse in (codec.parse_sender, codec.parse_reflector):
        try:
            pkt = parse(data)
        except ParseError:
            continue
        assert pkt.build() == data  # what parses, builds back to the same bytes


@settings(max_examples=500, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1), st.integers(0, 2**16 - 1), st.integers(0, 500),
       st.integers(0, 255))
def test_fuzzed_reflection_keeps_the_senders_fields(seq, stamp, error, padding, ttl):
    data = codec.SenderPacket(seq, stamp, ErrorEstimate.unpack(error), bytes(padding)).build()
    request = codec.parse_sender(data)
    try:
        reply = codec.reflect(request, len(data), sequence=1, receive_timestamp=2, timestamp=3,
                              error=codec.UNKNOWN_ERROR, ttl=ttl)
    except ParseError:
        assert len(data) < 41
        return
    assert len(reply) == len(data)
    r = codec.parse_reflector(reply)
    assert (r.sender_sequence, r.sender_timestamp, r.sender_error.pack(), r.sender_ttl) == (seq, stamp, error, ttl)

"""TWAMP-light test packets (RFC 5357 section 4.1.2 and 4.2.1, unauthenticated mode), pure: no I/O.

Sender packet (RFC 4656 4.1.2, used as-is by RFC 5357 4.1.2)::

    0   Sequence Number (4)
    4   Timestamp (8, NTP: seconds since 1900 . 2^-32 fraction)
    12  Error Estimate (2)
    14  Packet Padding (any)

Reflector packet (RFC 5357 4.2.1)::

    0   Sequence Number (4)           the reflector's own
    4   Timestamp (8)                 when the reflector sent it
    12  Error Estimate (2)
    14  MBZ (2)
    16  Receive Timestamp (8)         when the reflector received the sender's packet
    24  Sender Sequence Number (4)
    28  Sender Timestamp (8)
    36  Sender Error Estimate (2)
    38  MBZ (2)
    40  Sender TTL (1)
    41  Packet Padding (any)

A reflected packet is 27 bytes longer in its fixed part than the sender's, so the reflector takes those 27 bytes out
of the sender's padding (RFC 5357 4.2.1): a reply is never larger than its request, and a request shorter than
41 bytes cannot be answered.

Error Estimate (RFC 4656 4.1.2): S (clock synchronised), Z (MBZ; RFC 8186 uses it for the timestamp format, 0 is
NTP), Scale (6 bits), Multiplier (8 bits); the error is Multiplier * 2^(Scale - 32) seconds, and a Multiplier of
0 is invalid (here: the error is unknown).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

NTP_UNIX_OFFSET = 2_208_988_800  # seconds from 1900-01-01 to 1970-01-01
SENDER_HEADER = 14
REFLECTOR_HEADER = 41
MIN_SENDER_PADDING = REFLECTOR_HEADER - SENDER_HEADER  # 27: what a sender pads so its packet can be reflected
MAX_PACKET = 65_507  # the largest UDP payload over IPv4

P = TypeVar("P")

_SENDER = struct.Struct("!IQH")
_REFLECTOR = struct.Struct("!IQHHQIQHHB")
assert _SENDER.size == SENDER_HEADER and _REFLECTOR.size == REFLECTOR_HEADER


class ParseError(ValueError):
    """A datagram that is not a TWAMP test packet of the expected kind; the message says why."""


@dataclass(frozen=True)
class ErrorEstimate:
    synchronized: bool
    scale: int  # 0..63
    multiplier: int  # 1..255 (0: unknown error)
    z: bool = False

    @property
    def seconds(self) -> float:
        """The error bound in seconds (infinite when the multiplier is 0, which RFC 4656 forbids)."""
        if self.multiplier == 0:
            return math.inf
        return self.multiplier * 2.0 ** (self.scale - 32)

    def pack(self) -> int:
        return (self.synchronized << 15) | (self.z << 14) | ((self.scale & 0x3F) << 8) | (self.multiplier & 0xFF)

    @classmethod
    def unpack(cls, value: int) -> ErrorEstimate:
        return cls(synchronized=bool(value & 0x8000), z=bool(value & 0x4000), scale=(value >> 8) & 0x3F,
                   multiplier=value & 0xFF)

    @classmethod
    def from_seconds(cls, seconds: float, synchronized: bool) -> ErrorEstimate:
        """The smallest encodable estimate not below ``seconds`` (at least 2^-32 s, at most 255 * 2^31 s)."""
        if not seconds > 0 or math.isnan(seconds):
            seconds = 2.0 ** -32
        units = seconds * 2.0 ** 32  # in 2^-32 s
        scale = 0
        while scale < 63 and units > 255 * 2.0 ** scale:
            scale += 1
        multiplier = min(255, max(1, math.ceil(units / 2.0 ** scale)))
        return cls(synchronized=synchronized, scale=scale, multiplier=multiplier)


UNKNOWN_ERROR = ErrorEstimate(synchronized=False, scale=63, multiplier=255)


def to_ntp(unix_seconds: float) -> int:
    """A 64-bit NTP timestamp from Unix time (seconds)."""
    whole = math.floor(unix_seconds)
    fraction = min(int((unix_seconds - whole) * 2**32), 2**32 - 1)
    return (((whole + NTP_UNIX_OFFSET) & 0xFFFFFFFF) << 32) | fraction


def to_ntp_ns(unix_ns: int) -> int:
    """A 64-bit NTP timestamp from Unix time in nanoseconds (no float rounding)."""
    whole, ns = divmod(unix_ns, 10**9)
    return (((whole + NTP_UNIX_OFFSET) & 0xFFFFFFFF) << 32) | ((ns << 32) // 10**9)


def from_ntp(ntp: int) -> float:
    """Unix time (seconds) from a 64-bit NTP timestamp of era 0 (1900-2036) or, below 1968, era 1 (2036-2104)."""
    seconds = ntp >> 32
    if seconds < 0x7C558180:  # 1968-01-20: before it, the timestamp is read as the next era (RFC 4330 3)
        seconds += 2**32
    return seconds - NTP_UNIX_OFFSET + (ntp & 0xFFFFFFFF) / 2**32


@dataclass(frozen=True)
class SenderPacket:
    sequence: int
    timestamp: int  # NTP 64-bit
    error: ErrorEstimate
    padding: bytes = b""

    def build(self) -> bytes:
        return _SENDER.pack(self.sequence, self.timestamp, self.error.pack()) + self.padding


@dataclass(frozen=True)
class ReflectorPacket:
    sequence: int
    timestamp: int  # NTP: when the reflector sent it
    error: ErrorEstimate
    receive_timestamp: int  # NTP: when the reflector received the sender's packet
    sender_sequence: int
    sender_timestamp: int
    sender_error: ErrorEstimate
    sender_ttl: int
    padding: bytes = b""

    def build(self) -> bytes:
        return _REFLECTOR.pack(self.sequence, self.timestamp, self.error.pack(), 0, self.receive_timestamp,
                               self.sender_sequence, self.sender_timestamp, self.sender_error.pack(), 0,
                               self.sender_ttl & 0xFF) + self.padding


def build_sender(sequence: int, timestamp: int, error: ErrorEstimate, padding: int | bytes) -> bytes:
    """A sender packet; ``padding``: the padding's bytes, or a number of zero bytes."""
    if not 0 <= sequence <= 0xFFFFFFFF:
        raise ValueError(f"sequence {sequence} is not a 32-bit number")
    fill = bytes(padding) if isinstance(padding, int) else padding
    if not 0 <= len(fill) <= MAX_PACKET - SENDER_HEADER:
        raise ValueError(f"padding {len(fill)} is outside 0..{MAX_PACKET - SENDER_HEADER}")
    return SenderPacket(sequence, timestamp, error, fill).build()


def parse_sender(data: bytes) -> SenderPacket:
    if len(data) < SENDER_HEADER:
        raise ParseError(f"a sender packet has at least {SENDER_HEADER} bytes, got {len(data)}")
    sequence, timestamp, error = _SENDER.unpack_from(data)
    return SenderPacket(sequence, timestamp, ErrorEstimate.unpack(error), bytes(data[SENDER_HEADER:]))


def parse_reflector(data: bytes) -> ReflectorPacket:
    if len(data) < REFLECTOR_HEADER:
        raise ParseError(f"a reflector packet has at least {REFLECTOR_HEADER} bytes, got {len(data)}")
    (sequence, timestamp, error, mbz1, receive, s_seq, s_time, s_error, mbz2,
     ttl) = _REFLECTOR.unpack_from(data)
    if mbz1 or mbz2:
        raise ParseError("a reflector packet's MBZ fields (bytes 14-15 and 38-39) are not zero")
    return ReflectorPacket(sequence, timestamp, ErrorEstimate.unpack(error), receive, s_seq, s_time,
                           ErrorEstimate.unpack(s_error), ttl, bytes(data[REFLECTOR_HEADER:]))


def parse_counted(parse: Callable[[bytes], P], data: bytes, counters: dict[str, int]) -> P | None:
    """``parse(data)``, or None with ``counters["malformed"]`` raised: the reflector and the sender count a datagram
    that is not a packet of theirs and go on reading."""
    try:
        return parse(data)
    except ParseError:
        counters["malformed"] += 1
        return None


def reflect(request: SenderPacket, request_size: int, *, sequence: int, receive_timestamp: int, timestamp: int,
            error: ErrorEstimate, ttl: int) -> bytes:
    """The reply to a sender packet of ``request_size`` bytes: as large as the request (its padding shortened by
    27 bytes), never larger. Raises ParseError when the request is too short to be answered."""
    if request_size < REFLECTOR_HEADER:
        raise ParseError(f"a request of {request_size} bytes cannot be reflected: a reply has at least "
                         f"{REFLECTOR_HEADER} bytes and may not be larger than the request")
    padding = request.padding[:request_size - REFLECTOR_HEADER]
    padding = padding + bytes(request_size - REFLECTOR_HEADER - len(padding))
    return ReflectorPacket(sequence, timestamp, error, receive_timestamp, request.sequence, request.timestamp,
                           request.error, ttl, padding).build()

"""Kafka framing, server side: the int32 size prefix and the request header.

Request header v1 is int16 api_key, int16 api_version, int32 correlation_id,
nullable string client_id. A request for a version we do not serve still has
this prefix, which is all we need to answer it with UNSUPPORTED_VERSION.
A "flexible" version (KIP-482; cluster/protocol/api.py says which we serve)
has header v2: header v1 and then tagged fields, which `skip_tagged_fields`
steps over.

Responses carry header v0: int32 correlation_id; a flexible version's,
header v1: an empty set of tagged fields after it.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from cluster.protocol.control import ProtocolError

__all__ = ["ProtocolError", "RequestHeader", "parse_request_header", "skip_tagged_fields",
           "frame_response", "SIZE"]

SIZE = struct.Struct(">i")
_HDR = struct.Struct(">hhih")
_RESP_HDR = struct.Struct(">ii")


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int  # where the body starts in the frame


def parse_request_header(frame) -> RequestHeader:
    """Parse the header of a request frame (size prefix already removed).

    Raises ProtocolError, and nothing else, on bytes that cannot be a header.
    """
    if len(frame) < _HDR.size:
        raise ProtocolError(f"request frame of {len(frame)} bytes is shorter than a header")
    api_key, api_version, correlation_id, n = _HDR.unpack_from(frame, 0)
    pos = _HDR.size
    if n == -1:
        client_id = None
    elif n < 0 or pos + n > len(frame):
        raise ProtocolError(f"bad client_id length {n}")
    else:
        try:
            client_id = bytes(frame[pos:pos + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("client_id is not UTF-8") from None
        pos += n
    return RequestHeader(api_key, api_version, correlation_id, client_id, pos)


def _uvarint(frame, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(frame) or shift > 28:
            raise ProtocolError("a varint cut short or longer than 5 bytes")
        b = frame[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def skip_tagged_fields(frame, pos: int) -> int:
    """Where the body starts after header v2's tagged fields at `pos`."""
    count, pos = _uvarint(frame, pos)
    for _ in range(count):
        _tag, pos = _uvarint(frame, pos)
        size, pos = _uvarint(frame, pos)
        pos += size
        if pos > len(frame):
            raise ProtocolError("a tagged field past the end of the frame")
    return pos


def peek_correlation_id(frame) -> int | None:
    """The correlation id of a frame whose header may be otherwise broken."""
    if len(frame) >= 8:
        return struct.unpack_from(">i", frame, 4)[0]
    return None


def frame_response(correlation_id: int, body, flexible: bool = False) -> bytes:
    """A whole response frame: size, correlation id (header v0; v1 with
    empty tagged fields for a flexible version), body."""
    if flexible:
        return _RESP_HDR.pack(len(body) + 5, correlation_id) + b"\x00" + body
    return _RESP_HDR.pack(len(body) + 4, correlation_id) + body

"""Errors raised by the log storage.

The broker maps them onto Kafka error codes: OffsetOutOfRangeError is
OFFSET_OUT_OF_RANGE (1), CorruptRecordError is CORRUPT_MESSAGE (2).
"""
from __future__ import annotations


class LogError(Exception):
    """Base class of everything the log storage raises on purpose."""


class OffsetOutOfRangeError(LogError):
    """A read asked for an offset outside [log_start_offset, log_end_offset]."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int):
        super().__init__(
            f"offset {offset} is out of range [{log_start_offset}, {log_end_offset}]")
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class CorruptRecordError(LogError, ValueError):
    """Bytes that are not a sequence of valid RecordBatch v2 batches.

    Raised for a bad magic, a CRC mismatch, an impossible length or a
    truncated batch where whole batches are required.
    """


class InvalidOffsetError(LogError, ValueError):
    """A follower append whose offsets do not continue the log at its end."""


class CorruptCheckpointError(LogError, ValueError):
    """A checkpoint file that cannot be parsed. Checkpoints are replaced
    atomically, so this means a bug or outside tampering, never a torn write."""

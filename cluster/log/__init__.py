"""Log storage of the broker: Kafka's on-disk format, per partition replica.

`Log` (log.py) is one replica's directory of segments (segment.py, index.py)
holding RecordBatch v2 batches (batch.py); `LeaderEpochCache` (epoch_cache.py)
is its KIP-101 epoch -> start offset map; `LogManager` (manager.py) owns a
broker's log dir with its high-watermark and recovery-point checkpoints
(checkpoint.py).
"""
from .batch import BatchHeader, check_batch, iter_batches, parse_header
from .checkpoint import HighWatermarkCheckpoint, OffsetCheckpoint
from .epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache
from .errors import (CorruptCheckpointError, CorruptRecordError, InvalidOffsetError, LogError,
                     OffsetOutOfRangeError)
from .log import Log, LogConfig
from .manager import LogManager

__all__ = [
    "BatchHeader", "check_batch", "iter_batches", "parse_header",
    "HighWatermarkCheckpoint", "OffsetCheckpoint",
    "UNDEFINED_EPOCH", "UNDEFINED_EPOCH_OFFSET", "LeaderEpochCache",
    "CorruptCheckpointError", "CorruptRecordError", "InvalidOffsetError", "LogError",
    "OffsetOutOfRangeError",
    "Log", "LogConfig", "LogManager",
]

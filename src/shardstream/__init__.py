"""shardstream: stream MDS datasets far larger than memory into training loops."""

from .errors import (
    CorruptIndexError,
    CorruptShardError,
    EncodeError,
    HashMismatchError,
    IncompatibleStateError,
    IndexNotFoundError,
    InvalidArgumentError,
    MissingDependencyError,
    NotYetSupportedError,
    OutputExistsError,
    SampleIndexError,
    ShardNotFoundError,
    ShardstreamError,
    UnsafeEncodingError,
    UnsafePathError,
    UnsupportedFormatError,
    UploadError,
    WriterError,
)
from .format.batch import Ragged
from .format.encodings import encoding_names
from .format.inspect import inspect_dataset
from .format.verify import VerifyReport, verify_dataset
from .loader.dataset import StreamingDataset
from .merge import merge_index
from .writer import MDSWriter

__version__ = "0.1.0"

__all__ = [
    "MDSWriter", "StreamingDataset", "merge_index", "Ragged", "inspect_dataset", "verify_dataset",
    "VerifyReport", "encoding_names", "ShardstreamError", "CorruptIndexError", "CorruptShardError",
    "EncodeError", "HashMismatchError", "IncompatibleStateError", "IndexNotFoundError", "InvalidArgumentError",
    "MissingDependencyError", "NotYetSupportedError", "OutputExistsError", "SampleIndexError",
    "ShardNotFoundError", "UnsafeEncodingError", "UnsafePathError", "UnsupportedFormatError",
    "UploadError", "WriterError", "__version__",
]

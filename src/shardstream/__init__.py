"""shardstream: stream MDS datasets far larger than memory into training loops."""

from .errors import (
    CacheDirectoryError,
    CacheLimitError,
    CorruptIndexError,
    CorruptShardError,
    DownloadError,
    EncodeError,
    HashMismatchError,
    IncompatibleStateError,
    IndexNotFoundError,
    InvalidArgumentError,
    MissingDependencyError,
    NotADatasetError,
    NotYetSupportedError,
    OutputExistsError,
    OutputWriteError,
    RemoteChangedError,
    SampleIndexError,
    ShardNotFoundError,
    ShardstreamError,
    UnknownKeywordError,
    UnsafeEncodingError,
    UnsafePathError,
    UnsupportedFormatError,
    UploadError,
    WriterError,
)
from .format.batch import Ragged
from .format.encodings import encoding_names
from .check import inspect_dataset, verify_dataset
from .format.verify import VerifyReport
from .loaders.batches import BatchLoader
from .dataset.streaming import StreamingDataset
from .engine.stream import Stream, WeightSchedule
from .plan import World
from .writing.merge import merge_index
from .writing.mdswriter import MDSWriter
from .errors import SplitNotFoundError
from .errors import CacheMismatchError, ConfigError
from .errors import ConvertMismatchError, ConvertVerifyError
from .convert.run import ConvertResult, convert
from .pipeline import (DatasetConfig, LoadStageConfig, MixStageConfig, PackStageConfig, Pipeline, PipelineConfig,
                       SaveStageConfig, TokenizeStageConfig)
from .dataset.cache import cache_to_mds, read_cache_summary
from .hub import load_dataset
from .sources import (
    ArrowShardedSource,
    CsvShardedSource,
    HuggingFaceShardedSource,
    JsonShardedSource,
    ParquetShardedSource,
    ShardedSource,
    TextShardedSource,
    TransformedShardedSource,
)

from .errors import TransformError
from .engine.agree import RankBalanceWarning
from .loaders.asyncloader import AsyncDataLoader
from .dataset.chain import IterableDataset
from .dataset.interleave import interleave_datasets
from .text import ChatTemplateTransform, Pack, Tokenize
from .dataset.local import LocalDataset
from .engine.registry import streams_registry
from .format.customencodings import register_encoding

__version__ = "0.1.0"

__all__ = [
    "MDSWriter", "StreamingDataset", "Stream", "WeightSchedule", "StreamingDataLoader", "BatchLoader", "World",
    "merge_index", "Ragged",
    "inspect_dataset", "verify_dataset", "VerifyReport", "encoding_names", "ShardstreamError", "CorruptIndexError", "CorruptShardError",
    "EncodeError", "HashMismatchError", "IncompatibleStateError", "IndexNotFoundError", "InvalidArgumentError",
    "MissingDependencyError", "NotYetSupportedError", "OutputExistsError", "OutputWriteError", "SampleIndexError",
    "ShardNotFoundError", "UnknownKeywordError", "UnsafeEncodingError", "UnsafePathError", "UnsupportedFormatError",
    "CacheDirectoryError", "NotADatasetError", "RemoteChangedError", "DownloadError", "CacheLimitError",
    "UploadError", "WriterError", "__version__",
]
__all__ += [
    "load_dataset", "SplitNotFoundError", "ShardedSource", "ParquetShardedSource", "JsonShardedSource",
    "ArrowShardedSource", "CsvShardedSource", "TextShardedSource", "HuggingFaceShardedSource",
    "TransformedShardedSource",
]
__all__ += ["IterableDataset", "AsyncDataLoader", "interleave_datasets", "TransformError", "Tokenize",
            "ChatTemplateTransform", "Pack", "RankBalanceWarning"]
__all__ += [
    "Pipeline", "PipelineConfig", "DatasetConfig", "TokenizeStageConfig", "MixStageConfig", "PackStageConfig",
    "LoadStageConfig", "SaveStageConfig", "ConfigError", "CacheMismatchError", "cache_to_mds", "read_cache_summary",
]
__all__ += ["convert", "ConvertResult", "ConvertMismatchError", "ConvertVerifyError"]
__all__ += ["LocalDataset", "streams_registry", "register_encoding"]


def __getattr__(name: str):
    # imported on first use, so `import shardstream` never imports torch
    if name == "StreamingDataLoader":
        from .errors import MissingDependencyError

        try:
            from .integrations.torch import StreamingDataLoader
        except ImportError as exc:
            if exc.name is None or exc.name.split(".")[0] != "torch":
                raise
            raise MissingDependencyError(
                "StreamingDataLoader needs PyTorch; install it with: pip install 'shardstream[torch]'"
            ) from None
        return StreamingDataLoader
    raise AttributeError(f"module 'shardstream' has no attribute {name!r}")

from .errors import ColumnTypeError, DelimiterInValueError, MissingColumnError, TextColumnsError
from .writing.textwriters import CSVWriter, JSONWriter, TSVWriter, XSVWriter

__all__ += ["JSONWriter", "XSVWriter", "CSVWriter", "TSVWriter", "ColumnTypeError", "DelimiterInValueError",
            "MissingColumnError", "TextColumnsError"]

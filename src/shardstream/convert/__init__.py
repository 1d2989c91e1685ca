"""Converting data people already have (Parquet, JSON Lines, CSV, Arrow, HF datasets saved to disk, image
folders) into MDS datasets, on every core: :func:`convert` (the ``shardstream convert`` command), Arrow
batches encoded a column at a time (:class:`ArrowMDSWriter`), encodings inferred from an Arrow schema
(:func:`arrow_columns`)."""

from .batches import ArrowMDSWriter, write_batches
from .run import ConvertResult, convert
from .schema import arrow_columns, arrow_type_encoding, parse_columns

__all__ = ["ArrowMDSWriter", "ConvertResult", "arrow_columns", "arrow_type_encoding", "convert", "parse_columns",
           "write_batches"]

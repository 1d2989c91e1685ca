"""``shardstream.spark``: the Spark writer's public names (:mod:`shardstream.integrations.spark`), so that
``from shardstream.spark import write_mds, dataframe_to_mds`` reads as mosaicml-streaming users expect."""

from .integrations.spark import SparkPart, SparkWriteResult, ensure_java, spark_columns, write_mds
from .integrations.sparkcompat import dataframe_to_mds

__all__ = ["SparkPart", "SparkWriteResult", "dataframe_to_mds", "ensure_java", "spark_columns", "write_mds"]

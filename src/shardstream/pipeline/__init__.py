"""Declarative pipelines: datasets, tokenize, mix, pack, load and save, from a config or a YAML file.

``Pipeline.from_config(PipelineConfig(...))`` (or ``Pipeline.from_yaml(path)``) and the fluent builder
``pipeline.source().tokenize().pack().load().build()``; see :mod:`.build` for the fixed order of the
stages and :mod:`.config` for every setting.
"""

from .build import STAGE_ORDER, Pipeline
from .config import (DatasetConfig, LoadStageConfig, MixStageConfig, PackStageConfig, PipelineConfig,
                     SaveStageConfig, TokenizeStageConfig)

__all__ = ["DatasetConfig", "LoadStageConfig", "MixStageConfig", "PackStageConfig", "Pipeline", "PipelineConfig",
           "STAGE_ORDER", "SaveStageConfig", "TokenizeStageConfig"]

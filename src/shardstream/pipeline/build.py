"""``Pipeline``: a fluent builder that turns a :class:`~.config.PipelineConfig` into a dataset or a loader.

``pipeline.source().tokenize().pack().load().build()`` picks the stages; whatever order they are
called in, the chain is built in one fixed order::

    source -> mix -> shuffle buffer -> tokenize -> pack -> load (batches)

(the shuffle buffer is the load stage's ``shuffle_buffer_size``; a save stage sits right after the
stage its ``after`` names). A pipeline on which no stage was called builds every stage its config
has. Each builder call returns a new ``Pipeline``; keyword arguments change that stage's settings
(``.load(batch_size=32)``), and a stage the config lacks takes its defaults, or, when it has a
required setting (``tokenize.tokenizer``, ``pack.seq_len``, ``save.output``), a
:class:`~shardstream.errors.ConfigError` names it. :meth:`Pipeline.configure` changes settings
without picking stages.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Optional, Sequence

from ..errors import ConfigError, InvalidArgumentError
from ..dataset.cache import cache_to_mds, read_cache_summary
from .checks import closest, from_mapping
from .config import (LoadStageConfig, MixStageConfig, PackStageConfig, PipelineConfig, SaveStageConfig,
                     TokenizeStageConfig)
from .sources import open_source
from .stages import loader, packed, shuffled, tokenized

#: the order stages are built in, whatever order the builder was called in (``save`` goes after its ``after``)
STAGE_ORDER = ("source", "mix", "shuffle", "tokenize", "pack", "load")
_CONFIGS = {"tokenize": TokenizeStageConfig, "mix": MixStageConfig, "pack": PackStageConfig,
            "load": LoadStageConfig, "save": SaveStageConfig}


class Pipeline:
    """Builds the chain a :class:`PipelineConfig` describes (see the module docstring)."""

    def __init__(self, config: PipelineConfig, stages: Iterable[str] = ()) -> None:
        if not isinstance(config, PipelineConfig):
            raise InvalidArgumentError(f"Pipeline takes a PipelineConfig, got {type(config).__name__}; use "
                                       "Pipeline.from_config(...) for a mapping, Pipeline.from_yaml(path) for a file")
        self.config = config
        self._called = frozenset(stages)

    @classmethod
    def from_config(cls, config: Any) -> "Pipeline":
        """The pipeline of ``config``: a :class:`PipelineConfig`, or a mapping as ``PipelineConfig.from_dict``
        reads."""
        if not isinstance(config, PipelineConfig):
            config = PipelineConfig.from_dict(config)
        pipeline = cls(config)
        pipeline.stages  # the stages agree with one another (a save stage's after names one that is there)
        return pipeline

    @classmethod
    def from_yaml(cls, path: str, overrides: Sequence[str] = ()) -> "Pipeline":
        """The pipeline of the YAML file ``path`` (needs PyYAML: ``shardstream[yaml]``), with ``overrides``
        such as ``"load.batch_size=16"`` applied."""
        return cls.from_config(PipelineConfig.from_yaml(path, overrides))

    # -- the builder ------------------------------------------------------------------------------
    def source(self) -> "Pipeline":
        """The datasets (mixed by their weights when there are several)."""
        return Pipeline(self.config, self._called | {"source"})

    def mix(self, **settings: Any) -> "Pipeline":
        """Mix the datasets by the mix stage's weights or schedule (``MixStageConfig`` keywords change them)."""
        return self._stage("mix", settings)

    def tokenize(self, **settings: Any) -> "Pipeline":
        return self._stage("tokenize", settings)

    def pack(self, **settings: Any) -> "Pipeline":
        return self._stage("pack", settings)

    def load(self, **settings: Any) -> "Pipeline":
        """Batches from an ``AsyncDataLoader`` (and the shuffle buffer, with ``shuffle_buffer_size``)."""
        return self._stage("load", settings)

    def save(self, **settings: Any) -> "Pipeline":
        """Write the rows after ``save.after`` to MDS at ``save.output`` (or reuse them) and read on from there."""
        return self._stage("save", settings)

    def configure(self, **sections: dict) -> "Pipeline":
        """The same stages with settings changed: ``configure(load={"batch_size": 32}, save={"overwrite":
        True})``. Unlike the stage methods it picks no stage, so a pipeline on which none was called still
        builds every stage of its (changed) config."""
        config = self.config
        for name, settings in sections.items():
            if name not in _CONFIGS:
                raise ConfigError(f"pipeline.{name}: not a stage;{closest(name, list(_CONFIGS))} stages: "
                                  f"{', '.join(_CONFIGS)}", field=name, detail="not a stage")
            if not isinstance(settings, dict):
                raise ConfigError(f"pipeline.{name}: expected a mapping of settings, got {settings!r:.80}",
                                  field=name, detail="expected a mapping")
            config = _with_stage(config, name, settings)
        return Pipeline(config, self._called)

    def _stage(self, name: str, settings: dict) -> "Pipeline":
        return Pipeline(_with_stage(self.config, name, settings), self._called | {name})

    # -- what is built ----------------------------------------------------------------------------
    @property
    def stages(self) -> tuple[str, ...]:
        """The stages :meth:`build` makes, in the order it makes them."""
        config = self.config
        chosen = set(self._called) or {"source"} | {n for n in _CONFIGS if getattr(config, n) is not None}
        if "load" in chosen and (config.load or LoadStageConfig()).shuffle_buffer_size:
            chosen.add("shuffle")
        names = ["source"] + [n for n in STAGE_ORDER[1:] if n in chosen]
        if "save" in chosen:
            after = config.save.after
            if after not in names:
                raise ConfigError(f"pipeline.save.after: {after!r}, but this pipeline builds no {after} stage "
                                  f"(it builds {', '.join(names)}); configure pipeline.{after} (or call .{after}()), "
                                  "or save after another stage", field="save.after", detail=f"no {after} stage")
            point = "mix" if after == "source" and "mix" in names else after  # the source is mixed first
            names.insert(names.index(point) + 1, "save")
        return tuple(names)

    def build(self) -> Any:
        """The chain: an ``AsyncDataLoader`` of batches with a load stage, else the dataset of rows.

        With a save stage, the rows up to its ``after`` are written to MDS first (or an earlier run's
        are reused) and the rest of the chain reads them from there."""
        names = self.stages
        config = self.config
        load = (config.load or LoadStageConfig()) if "load" in names else None
        tokenize = config.tokenize if "tokenize" in names else None
        rename_to = tokenize.column if tokenize is not None and tokenize.messages_field is None else None
        mix = (config.mix or MixStageConfig()) if "mix" in names else None
        dataset = open_source(config, mix, rename_to, load.batch_size if load is not None else None)
        for name in names[1:]:
            if name == "shuffle":
                dataset = shuffled(dataset, load, config.seed)
            elif name == "tokenize":
                dataset = tokenized(dataset, tokenize)
            elif name == "pack":
                dataset = packed(dataset, config.pack)
            elif name == "save":
                save = config.save
                dataset = cache_to_mds(dataset, save.output, storage_options=save.storage_options,
                                       overwrite=save.overwrite)
            elif name == "load":
                return loader(dataset, load, config.seed)
        return dataset

    def cache_summary(self) -> Optional[dict]:
        """What the save stage's output holds (rows, tokens, columns, fingerprint ...), None when it holds no
        complete cache (or the pipeline has no save stage)."""
        save = self.config.save
        if save is None:
            return None
        return read_cache_summary(save.output, storage_options=save.storage_options)

    def __repr__(self) -> str:
        return f"Pipeline({' -> '.join(self.stages)})"


def _with_stage(config: PipelineConfig, name: str, settings: dict) -> PipelineConfig:
    """``config`` with its stage ``name`` given ``settings`` (made with its defaults when it has none)."""
    cls = _CONFIGS[name]
    current = getattr(config, name)
    if current is None:
        required = [f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        missing = [r for r in required if r not in settings]
        if missing:
            raise ConfigError(
                f"pipeline.{name}: the pipeline has no {name} stage; set pipeline.{name}.{missing[0]} in its "
                f"config ({cls.__name__}({missing[0]}=...)), or call .{name}({missing[0]}=...)",
                field=f"{name}.{missing[0]}", detail="missing")
        merged = dict(settings)
    else:
        merged = {**{f.name: getattr(current, f.name) for f in dataclasses.fields(cls)}, **settings}
    stage = from_mapping(cls, merged, f"pipeline.{name}") if settings or current is None else current
    try:
        return dataclasses.replace(config, **{name: stage})
    except ConfigError as exc:
        raise ConfigError(f"pipeline.{exc.field}: {exc.detail}", field=exc.field, detail=exc.detail) from None

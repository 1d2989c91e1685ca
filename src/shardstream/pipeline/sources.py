"""Opening a pipeline's datasets: one ``StreamingDataset`` each, and several mixed into one.

A dataset of data files (``type`` parquet, json, jsonl, arrow, csv, text) or of the Hub (``hf``) is
opened by :func:`shardstream.load_dataset`; an MDS dataset, or files whose format is taken from their
names (``type`` None), by ``StreamingDataset``. Several datasets are mixed by
:func:`shardstream.interleave_datasets`, in the plan: with fixed weights, or with a weight schedule
that moves the proportions with the run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional, Sequence

from ..errors import ConfigError
from ..hub.load import load_dataset
from ..dataset.streaming import StreamingDataset
from ..engine.stream import WeightSchedule
from ..engine.world import rank_world
from ..storage.fs import is_remote
from ..units import parse_count
from ..dataset.interleave import interleave_datasets
from .config import DatasetConfig, MixStageConfig, PipelineConfig


def open_dataset(config: DatasetConfig) -> StreamingDataset:
    """The ``StreamingDataset`` of one dataset."""
    kind = config.type
    if kind == "hf":
        return load_dataset(config.data_files, name=config.subset, split=config.split or "train",
                            columns=config.columns, storage_options=config.storage_options,
                            cache_dir=config.cache_dir)
    if kind not in (None, "mds"):
        files = config.data_files
        return load_dataset(kind, data_files=dict(files) if isinstance(files, Mapping) else _listed(files),
                            split=config.split or "train", columns=config.columns,
                            storage_options=config.storage_options, cache_dir=config.cache_dir)
    location = _location(config, "type: mds" if kind == "mds" else "type")
    where = ({"remote": location, "local": config.cache_dir} if _remote(location) else {"local": location})
    return StreamingDataset(**where, split=config.split, columns=config.columns,
                            storage_options=config.storage_options, format=kind)


def _listed(files: Any) -> Any:
    return list(files) if isinstance(files, (list, tuple)) else files


def _remote(location: Any) -> bool:
    first = location[0] if isinstance(location, (list, tuple)) else location
    return is_remote(str(first))


def _location(config: DatasetConfig, what: str) -> Any:
    if isinstance(config.data_files, Mapping):
        raise ConfigError(f"datasets: a mapping of split -> files needs the files' type ({what}: parquet, jsonl, "
                          "...); an MDS dataset is a directory, its split a subdirectory (split: train)")
    return _listed(config.data_files)


def open_source(config: PipelineConfig, mix: Optional[MixStageConfig], rename_to: Optional[str],
                steps_batch: Optional[int]) -> Any:
    """The pipeline's source: its one dataset, or its datasets mixed (``mix``: the mix stage's settings,
    None: by each dataset's weight). ``rename_to``: the column the datasets' ``text_column`` becomes.
    ``steps_batch``: the batch size that turns a schedule's steps into samples."""
    datasets = config.datasets
    opened = [open_dataset(d) for d in datasets]
    if len(opened) == 1:
        return _renamed(opened[0], datasets, rename_to)
    mix = mix or MixStageConfig(weights=[d.weight for d in datasets])
    schedule = None
    if mix.schedule is not None:
        kind, points = mix.schedule_points()
        schedule = WeightSchedule([(_position(p, steps_batch),
                                    config.dataset_weights(p["weights"], where=f"mix.schedule[{i}].weights"))
                                   for i, p in enumerate(points)], kind=kind)
        weights = None
    else:
        weights = config.dataset_weights(mix.weights if mix.weights is not None else [d.weight for d in datasets])
        if sum(weights) <= 0:
            raise ConfigError("pipeline.mix.weights: the weights sum to 0; give at least one dataset a positive "
                              "weight")
    mixed = interleave_datasets(opened, probabilities=weights, seed=config.seed + mix.seed,
                                stopping_strategy=mix.stopping_strategy, weight_schedule=schedule)
    return _renamed(mixed, datasets, rename_to)


def _renamed(dataset: Any, configs: Sequence[DatasetConfig], rename_to: Optional[str]) -> Any:
    """``dataset`` with the datasets' text column renamed to ``rename_to`` (when they name one)."""
    columns = {d.text_column for d in configs} - {"text"}
    if rename_to is None or not columns or columns == {rename_to}:
        return dataset
    if len(columns) > 1 or len(configs) > len([d for d in configs if d.text_column in columns]):
        named = sorted({d.text_column for d in configs})
        raise ConfigError(f"pipeline.datasets: mixed datasets are read as one, so their text_column must agree; "
                          f"they name {named}: give the column one name in every dataset's files")
    return dataset.rename_column(columns.pop(), rename_to)


def _position(point: dict, steps_batch: Optional[int]) -> Any:
    if "position" in point:
        return point["position"]
    if steps_batch is None:
        raise ConfigError("pipeline.mix.schedule: a point given in steps needs the batch size of a step; set "
                          "pipeline.load.batch_size (and build the load stage) or give positions (samples)")
    return parse_count(point["step"], "step") * steps_batch * rank_world().world_size

"""The configuration of a :class:`~shardstream.pipeline.Pipeline`: one frozen dataclass per stage.

Every class checks its values when it is made and raises :class:`~shardstream.errors.ConfigError`
naming the field, the value received and what is allowed. :meth:`PipelineConfig.from_dict` builds the
whole tree from plain data (what a YAML file holds) and refuses unknown keys at any level with the
key's path and the closest known key; :meth:`PipelineConfig.to_dict` gives that data back.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

from ..errors import ConfigError
from .checks import (bad, check_bool, check_choice, check_int, check_mapping, check_names, check_number,
                     check_str, from_mapping, plain, shown)

#: what ``DatasetConfig.type`` may be: a format of data files, an MDS dataset, or a Hugging Face dataset
DATASET_TYPES = (None, "parquet", "json", "jsonl", "arrow", "csv", "text", "mds", "hf")
PACK_STRATEGIES = ("greedy", "first_fit")
STOPPING_STRATEGIES = ("first_exhausted", "all_exhausted")
SAVE_POINTS = ("source", "tokenize", "pack")
SCHEDULE_KINDS = ("step", "linear", "cosine")


@dataclass(frozen=True)
class DatasetConfig:
    """One dataset of the pipeline's source.

    ``data_files``: a path, glob, directory or URL, a list of them, or a mapping of split -> paths;
    for ``type="hf"`` a Hub id (``user/name``) or an ``hf://`` path (``subset`` picks its
    configuration); for ``type="mds"`` an MDS dataset's directory or URL. ``type`` None: the format is
    taken from the files' names. ``split``: which split (default ``train``). ``columns``: read only
    these (data files only). ``name``: a label (mix weights by name, logs). ``weight``: its share of a
    mixture (relative to the others). ``storage_options``: for fsspec. ``cache_dir``: where a remote
    dataset's pieces are cached. ``text_column``: the column holding the text, renamed to the tokenize
    stage's ``column`` when they differ.
    """

    data_files: Union[str, Sequence[str], Mapping[str, Any]]
    type: Optional[str] = None
    split: Optional[str] = None
    columns: Optional[Sequence[str]] = None
    name: Optional[str] = None
    weight: float = 1.0
    storage_options: Optional[Mapping[str, Any]] = None
    cache_dir: Optional[str] = None
    text_column: str = "text"
    subset: Optional[str] = None

    def __post_init__(self) -> None:
        owner = "DatasetConfig"
        object.__setattr__(self, "data_files", _data_files(owner, self.data_files))
        check_choice(owner, "type", self.type, DATASET_TYPES)
        if self.type == "hf" and not isinstance(self.data_files, str):
            raise bad(owner, "data_files", f"with type: hf, data_files is one Hub id (user/name) or hf:// path, "
                                           f"got {shown(self.data_files)}")
        for name in ("split", "name", "cache_dir", "subset"):
            check_str(owner, name, getattr(self, name), optional=True)
        object.__setattr__(self, "columns", check_names(owner, "columns", self.columns))
        if self.type == "mds" and self.columns is not None:
            raise bad(owner, "columns", "an MDS dataset is read whole; columns= selects columns of data files "
                                        "(parquet, json, csv, ...): leave it out, or drop columns in a map")
        if self.subset is not None and self.type != "hf":
            raise bad(owner, "subset", f"{self.subset!r} picks a configuration of a Hugging Face dataset; "
                                       "set type: hf, or leave subset out")
        object.__setattr__(self, "weight", check_number(owner, "weight", self.weight))
        object.__setattr__(self, "storage_options", check_mapping(owner, "storage_options", self.storage_options))
        check_str(owner, "text_column", self.text_column)


def _data_files(owner: str, value: Any) -> Any:
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, str) and value:
        return value
    if isinstance(value, Mapping) and value and all(isinstance(k, str) for k in value):
        return {k: _data_files(owner, v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str) and value \
            and all(isinstance(v, (str, os.PathLike)) and v for v in value):
        return tuple(os.fspath(v) for v in value)
    raise bad(owner, "data_files", f"expected a path, glob or URL, a list of them, or a mapping of split -> "
                                   f"paths, got {shown(value)}")


@dataclass(frozen=True)
class TokenizeStageConfig:
    """Tokenize each row's ``column`` (or, with ``messages_field``, render its chat with the chat template
    and tokenize it, with a loss mask on the assistant's tokens) into ``input_ids``.

    ``tokenizer``: the path of a ``tokenizer.json`` or of a local Hugging Face tokenizer directory.
    ``max_length`` / ``truncation``: cut documents to ``max_length`` tokens. ``append_eos``: end each
    document with the tokenizer's end-of-sequence token (documents stay apart once packed).
    ``chat_template``: a Jinja template string (or a file holding one) for tokenizers without one.
    ``batch_size``: rows tokenized per call. ``append_eos`` and ``add_special_tokens`` apply to text; a
    chat's template writes its own end-of-turn tokens.
    """

    tokenizer: str
    column: str = "text"
    max_length: Optional[int] = None
    truncation: bool = False
    append_eos: bool = True
    add_special_tokens: bool = True
    chat_template: Optional[str] = None
    messages_field: Optional[str] = None
    batch_size: int = 1000

    def __post_init__(self) -> None:
        owner = "TokenizeStageConfig"
        check_str(owner, "tokenizer", self.tokenizer)
        object.__setattr__(self, "tokenizer", os.fspath(self.tokenizer))
        check_str(owner, "column", self.column)
        check_int(owner, "max_length", self.max_length, 1, optional=True)
        for name in ("truncation", "append_eos", "add_special_tokens"):
            check_bool(owner, name, getattr(self, name))
        if self.truncation and self.max_length is None:
            raise bad(owner, "truncation", "true cuts documents to max_length tokens; set max_length too")
        check_str(owner, "chat_template", self.chat_template, optional=True)
        check_str(owner, "messages_field", self.messages_field, optional=True)
        if self.chat_template is not None and self.messages_field is None:
            raise bad(owner, "chat_template", "a chat template renders the conversation in messages_field; "
                                              "set messages_field (e.g. messages) too")
        check_int(owner, "batch_size", self.batch_size, 1)


@dataclass(frozen=True)
class MixStageConfig:
    """How several datasets are mixed: fixed ``weights`` (a list, one per dataset, or a mapping by dataset
    name; default: each dataset's ``weight``) or a ``schedule`` of weights that move with the run.

    ``schedule``: a list of points ``{"position": samples, "weights": [...]}`` (``position`` counts
    source samples, ``"10M"`` style allowed) or ``{"step": n, "weights": [...]}`` (``n`` global
    batches: ``n * load.batch_size * ranks`` samples), or ``{"kind": "linear"|"cosine"|"step",
    "points": [...]}``. ``stopping_strategy``: with fixed weights, whether the mixture ends when the
    first dataset runs out or when all have (those that ran out start again).
    """

    weights: Optional[Union[Sequence[float], Mapping[str, float]]] = None
    schedule: Optional[Union[Sequence[Mapping[str, Any]], Mapping[str, Any]]] = None
    seed: int = 0
    stopping_strategy: str = "first_exhausted"

    def __post_init__(self) -> None:
        owner = "MixStageConfig"
        object.__setattr__(self, "weights", _weights(owner, "weights", self.weights, optional=True))
        object.__setattr__(self, "schedule", _schedule(owner, self.schedule))
        if self.weights is not None and self.schedule is not None:
            raise bad(owner, "schedule", "give weights or a schedule, not both")
        check_int(owner, "seed", self.seed, 0)
        check_choice(owner, "stopping_strategy", self.stopping_strategy, STOPPING_STRATEGIES)

    def schedule_points(self) -> tuple[str, list[dict]]:
        """``(kind, points)`` of the schedule (kind ``linear`` unless it names one)."""
        if isinstance(self.schedule, Mapping):
            return self.schedule.get("kind", "linear"), list(self.schedule["points"])
        return "linear", list(self.schedule or ())


def _weights(owner: str, name: str, value: Any, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if isinstance(value, Mapping) and value and all(isinstance(k, str) for k in value):
        return {k: check_number(owner, f"{name}.{k}", v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str) and value:
        return tuple(check_number(owner, f"{name}[{i}]", v) for i, v in enumerate(value))
    raise bad(owner, name, f"expected a list of weights (one per dataset) or a mapping of dataset name -> "
                           f"weight, got {shown(value)}")


def _schedule(owner: str, value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, Mapping):
        extra = set(value) - {"kind", "points"}
        if extra or "points" not in value:
            raise bad(owner, "schedule", f"a schedule mapping has keys kind and points, got {sorted(value)}")
        check_choice(owner, "schedule.kind", value.get("kind", "linear"), SCHEDULE_KINDS)
        return {"kind": value.get("kind", "linear"), "points": _points(owner, value["points"], "schedule.points")}
    return _points(owner, value, "schedule")


def _points(owner: str, value: Any, name: str) -> tuple:
    if isinstance(value, (str, Mapping)) or not isinstance(value, Sequence) or not value:
        raise bad(owner, name, f"expected a list of points like {{position: 0, weights: [0.5, 0.5]}}, "
                               f"got {shown(value)}")
    points = []
    for i, point in enumerate(value):
        where = f"{name}[{i}]"
        if not isinstance(point, Mapping):
            raise bad(owner, where, f"expected {{position: N, weights: [...]}} or {{step: N, weights: [...]}}, "
                                    f"got {shown(point)}")
        keys = set(point)
        at_keys = keys & {"position", "step"}
        if len(at_keys) != 1 or "weights" not in keys or keys - {"position", "step", "weights"}:
            raise bad(owner, where, f"a point has weights and one of position or step, got keys {sorted(keys)}")
        (at_key,) = at_keys
        at_value = point[at_key]
        if isinstance(at_value, bool) or not isinstance(at_value, (int, str)) \
                or (isinstance(at_value, int) and at_value < 0):
            raise bad(owner, f"{where}.{at_key}", f"expected a count >= 0 (e.g. 1000 or '10M'), got {shown(at_value)}")
        points.append({at_key: at_value, "weights": _weights(owner, f"{where}.weights", point["weights"])})
    return tuple(points)


@dataclass(frozen=True)
class PackStageConfig:
    """Pack tokenized documents into rows of exactly ``seq_len`` tokens (``input_ids``, ``segment_ids``,
    ``position_ids``, ``loss_mask``). ``strategy``: ``greedy`` (documents in order into one open row) or
    ``first_fit``; ``keep_remainder``: a document that does not fit continues in the next row (else it
    starts the next row, the open one padded with ``pad_id``); ``truncate`` (with ``keep_remainder``
    false): a document longer than ``seq_len`` keeps its first ``seq_len`` tokens instead of being an
    error."""

    seq_len: int
    strategy: str = "greedy"
    pad_id: int = 0
    keep_remainder: bool = True
    truncate: bool = False

    def __post_init__(self) -> None:
        owner = "PackStageConfig"
        check_int(owner, "seq_len", self.seq_len, 1)
        check_choice(owner, "strategy", self.strategy, PACK_STRATEGIES)
        check_int(owner, "pad_id", self.pad_id, 0)
        check_bool(owner, "keep_remainder", self.keep_remainder)
        check_bool(owner, "truncate", self.truncate)
        if self.truncate and self.keep_remainder:
            raise bad(owner, "truncate", "true cuts documents longer than seq_len, but keep_remainder: true carries "
                                         "their rest into the next rows instead; set keep_remainder: false too")


@dataclass(frozen=True)
class LoadStageConfig:
    """Batches for the training loop, made ahead in background threads (``AsyncDataLoader``).

    ``shuffle_buffer_size``: rows of a shuffle buffer placed right after the source (before
    tokenizing), seeded by ``seed``; None: no buffer. ``drop_last``: drop a last, smaller batch."""

    batch_size: int = 8
    prefetch_enabled: bool = True
    prefetch_workers: int = 2
    prefetch_buffer_size: int = 4
    shuffle_buffer_size: Optional[int] = None
    seed: int = 0
    drop_last: bool = True

    def __post_init__(self) -> None:
        owner = "LoadStageConfig"
        check_int(owner, "batch_size", self.batch_size, 1)
        check_bool(owner, "prefetch_enabled", self.prefetch_enabled)
        check_int(owner, "prefetch_workers", self.prefetch_workers, 1)
        check_int(owner, "prefetch_buffer_size", self.prefetch_buffer_size, 1)
        check_int(owner, "shuffle_buffer_size", self.shuffle_buffer_size, 1, optional=True)
        check_int(owner, "seed", self.seed, 0)
        check_bool(owner, "drop_last", self.drop_last)


@dataclass(frozen=True)
class SaveStageConfig:
    """Write the processed rows to MDS at ``output`` (a directory or an fsspec URL) after the stage
    ``after`` names, and read on from there: a later run with the same source and stages reuses it.
    ``overwrite``: replace a cache the source or stages no longer match (else that is an error)."""

    output: str
    after: str = "pack"
    overwrite: bool = False
    storage_options: Optional[Mapping[str, Any]] = None

    def __post_init__(self) -> None:
        owner = "SaveStageConfig"
        check_str(owner, "output", self.output)
        object.__setattr__(self, "output", os.fspath(self.output))
        check_choice(owner, "after", self.after, SAVE_POINTS)
        check_bool(owner, "overwrite", self.overwrite)
        object.__setattr__(self, "storage_options", check_mapping(owner, "storage_options", self.storage_options))


_STAGES = {"tokenize": TokenizeStageConfig, "mix": MixStageConfig, "pack": PackStageConfig,
           "load": LoadStageConfig, "save": SaveStageConfig}


@dataclass(frozen=True)
class PipelineConfig:
    """A whole pipeline: its ``datasets`` and the stages it has (None: not there). ``seed`` is added to
    every stage's own seed, so one number reseeds the whole pipeline. ``streaming`` must be true:
    shardstream streams always."""

    datasets: Sequence[DatasetConfig]
    streaming: bool = True
    tokenize: Optional[TokenizeStageConfig] = None
    mix: Optional[MixStageConfig] = None
    pack: Optional[PackStageConfig] = None
    load: Optional[LoadStageConfig] = None
    save: Optional[SaveStageConfig] = None
    seed: int = 0

    def __post_init__(self) -> None:
        owner = "PipelineConfig"
        try:
            self._convert()
        except ConfigError as exc:
            raise bad(owner, exc.field, exc.detail) from None
        if self.streaming is not True:
            raise bad(owner, "streaming", f"{shown(self.streaming)}: shardstream always streams (it never loads a "
                                          "dataset into memory); set streaming: true")
        check_int(owner, "seed", self.seed, 0)
        self._check_names(owner)
        if self.mix is not None:
            self._check_mix(owner, self.mix)

    def _convert(self) -> None:
        datasets = self.datasets
        if isinstance(datasets, (DatasetConfig, Mapping)):
            datasets = [datasets]
        if isinstance(datasets, str) or not isinstance(datasets, Sequence) or not datasets:
            raise ConfigError("datasets: expected a non-empty list of datasets", field="datasets",
                              detail=f"expected a non-empty list of datasets, got {shown(datasets)}")
        object.__setattr__(self, "datasets", tuple(from_mapping(DatasetConfig, d, f"datasets[{i}]")
                                                   for i, d in enumerate(datasets)))
        for name, cls in _STAGES.items():
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, from_mapping(cls, value, name))

    def _check_names(self, owner: str) -> None:
        names = [d.name for d in self.datasets if d.name is not None]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise bad(owner, "datasets", f"names must be unique; {duplicated[0]!r} names more than one dataset")

    def _check_mix(self, owner: str, mix: MixStageConfig) -> None:
        if mix.weights is not None:
            self.dataset_weights(mix.weights, owner, "mix.weights")
        if mix.schedule is not None:
            _, points = mix.schedule_points()
            for i, point in enumerate(points):
                self.dataset_weights(point["weights"], owner, f"mix.schedule[{i}].weights")
                if "step" in point and self.pack is not None:
                    raise bad(owner, f"mix.schedule[{i}].step",
                              "steps count packed batches, which the source's plan cannot know in advance; "
                              "give the point as position: N (source samples) instead")

    def dataset_weights(self, weights: Any, owner: str = "PipelineConfig", where: str = "mix.weights") -> list:
        """``weights`` (a list, or a mapping by dataset name) as one float per dataset, in order."""
        n = len(self.datasets)
        if isinstance(weights, Mapping):
            names = [d.name for d in self.datasets]
            unknown = [k for k in weights if k not in names]
            if unknown or None in names:
                known = ", ".join(repr(x) for x in names if x is not None) or "none"
                raise bad(owner, where, f"weights by name need a name on every dataset and one weight per "
                                        f"name; unknown or unnamed: {unknown or 'a dataset without name'} "
                                        f"(dataset names: {known})")
            return [float(weights.get(name, 0.0)) for name in names]
        if len(weights) != n:
            raise bad(owner, where, f"{len(weights)} weights for {n} datasets; give one weight per dataset")
        return [float(w) for w in weights]

    @classmethod
    def from_dict(cls, data: Any) -> "PipelineConfig":
        """The config of ``data``: a mapping with the fields' names as keys (optionally under a top-level
        ``pipeline`` key), as :meth:`to_dict` gives and YAML files hold."""
        if isinstance(data, Mapping) and set(data) == {"pipeline"}:
            data = data["pipeline"]
        return from_mapping(cls, data, "pipeline")

    @classmethod
    def from_yaml(cls, path: str, overrides: Sequence[str] = ()) -> "PipelineConfig":
        """The config in the YAML file ``path`` (needs PyYAML: ``shardstream[yaml]``), with ``overrides``
        such as ``"load.batch_size=16"`` applied."""
        from .yamlconfig import config_from_yaml

        return config_from_yaml(path, overrides)

    def to_yaml(self, path: Optional[str] = None) -> str:
        """This config as YAML text, also written to ``path`` when given."""
        from .yamlconfig import config_to_yaml

        return config_to_yaml(self, path)

    def to_dict(self) -> dict:
        """Plain data (lists, dicts, numbers, strings) that :meth:`from_dict` makes this config from."""
        out = {}
        for f in dataclasses.fields(self):
            if not f.init:
                continue
            value = getattr(self, f.name)
            if f.name == "datasets":
                out[f.name] = [_as_dict(d) for d in value]
            elif dataclasses.is_dataclass(value):
                out[f.name] = _as_dict(value)
            else:
                out[f.name] = plain(value)
        return out


def _as_dict(config: Any) -> dict:
    return {f.name: plain(getattr(config, f.name)) for f in dataclasses.fields(config) if f.init}

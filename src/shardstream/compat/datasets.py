"""mosaicml-streaming's ``StreamingDataset`` as the compatibility module offers it: shardstream's, with
the epoch tail a script does not choose taken from :func:`shardstream.compat.install`'s ``epoch_tail``
(``python -m shardstream.compat --epoch-tail mosaic script.py``), so a script run unchanged can get
mosaicml-streaming's epoch lengths, short last batch and ``drop_last`` without editing it. ``"mosaic"``
sizes datasets read from one source; a dataset mixed from streams (or given ``epoch_size``) keeps
shardstream's tail, which counts a mixture's epoch exactly."""

from __future__ import annotations

from typing import Any, Optional

from ..dataset.streaming import StreamingDataset as _StreamingDataset
from ..plan.settings import DEFAULT_EPOCH_TAIL, EPOCH_TAILS, check_choice

DEFAULTS = {"epoch_tail": DEFAULT_EPOCH_TAIL}


def set_epoch_tail(epoch_tail: Optional[str]) -> None:
    """The ``epoch_tail`` of datasets built through the compatibility module without one (None: ours)."""
    if epoch_tail is not None:
        check_choice("epoch_tail", epoch_tail, EPOCH_TAILS)
    DEFAULTS["epoch_tail"] = epoch_tail or DEFAULT_EPOCH_TAIL


class StreamingDataset(_StreamingDataset):
    """shardstream's :class:`~shardstream.StreamingDataset`; ``epoch_tail`` left out takes the default
    chosen for the compatibility module (see :func:`set_epoch_tail`)."""

    def __init__(self, *, epoch_tail: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(epoch_tail=epoch_tail or default_tail(kwargs), **kwargs)


def default_tail(kwargs: dict) -> str:
    """The default tail for a dataset built with ``kwargs``: ``"mosaic"`` applies to a dataset read from
    one source (it sizes no mixture), so a mixture keeps shardstream's, as the docs say."""
    tail = DEFAULTS["epoch_tail"]
    mixed = any(kwargs.get(k) is not None for k in ("streams", "epoch_size", "weight_schedule"))
    return DEFAULT_EPOCH_TAIL if tail == "mosaic" and mixed else tail

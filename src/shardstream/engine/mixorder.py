"""The order of a dataset mixed from several streams: a strategy of the :class:`~.cursor.EpochCursor`.

Like :class:`~shardstream.engine.order.SingleOrder`, but each epoch is a
:class:`~shardstream.plan.mixed.MixedEpoch`. A state holds the epoch and the global
position in it, plus a description of the mixture (streams, weights, methods), so it is
refused for another mixture. ``random`` batching resumes with any global batch;
the other methods fix their unit (the global batch, or the device batch for
``device_per_stream``) for the rest of an epoch, and the next epoch may use another.
"""

from __future__ import annotations

import warnings
from typing import Optional

import numpy as np

from ..errors import IncompatibleStateError, InvalidArgumentError
from ..plan import PlanSpec, World
from ..plan.mixed import MixedEpoch, Mixture, MixSpec
from .cursor import Pass
from .order import SingleOrder
from .state import ResumePoint, make_state
from .stream import resolve_weights


class MixedOrder(SingleOrder):
    def __init__(self, stream_sizes: list[np.ndarray], options, fingerprint: str, *, choose, schedule,
                 epoch_size: Optional[int], description: dict) -> None:
        if options.epoch_tail == "mosaic":
            raise InvalidArgumentError(
                "epoch_tail='mosaic' sizes the epoch of a dataset read from one source; a dataset mixed from "
                "streams (or given epoch_size) counts its epoch exactly: use epoch_tail='pad' or 'drop' "
                "(see docs/migrating.md)")
        sizes = np.concatenate(stream_sizes) if stream_sizes else np.zeros(0, np.int64)
        super().__init__(sizes, options, fingerprint)
        self.stream_sizes = stream_sizes
        self.mix = MixSpec(method=options.batching_method, sampling=options.sampling_method,
                           granularity=options.sampling_granularity)
        self._weights = {"choose": choose, "schedule": schedule, "epoch_size": epoch_size}
        self.description = description
        self._mixtures: dict[PlanSpec, Mixture] = {}
        self._epochs: dict[tuple, MixedEpoch] = {}

    def mixture(self, spec: PlanSpec) -> Mixture:
        m = self._mixtures.get(spec)
        if m is None:
            self._mixtures = {spec: Mixture(self.stream_sizes, spec, self.mix, **self._weights)}
            self._epochs = {}
            m = self._mixtures[spec]
        return m

    def counts(self, epoch: int) -> np.ndarray:
        """Samples each stream supplies to ``epoch``."""
        return self.mixture(self._spec_with(1)).counts(epoch)

    @property
    def epoch_size(self) -> int:
        return self.mixture(self._spec_with(1)).epoch_size

    def weights_at(self, epoch: int, position: int) -> np.ndarray:
        """The streams' weights in effect at ``position`` of ``epoch``."""
        return self.mixture(self._spec_with(1)).weights_at(epoch, position)

    def _epoch(self, spec: PlanSpec, epoch: int, g: int, origin: int = 0) -> MixedEpoch:
        key = (epoch, g, self.options.batch_size or 1, origin)
        plan = self._epochs.get(key)
        if plan is None:
            if len(self._epochs) > 4:
                self._epochs.clear()
            plan = self._epochs[key] = self.mixture(spec).epoch(epoch, g, self.options.batch_size or 1, origin)
        return plan

    def epoch_plan(self, epoch: int, world: World) -> MixedEpoch:
        return self._epoch(self.spec(world), epoch, self.global_batch(world))

    def check(self, world: World) -> None:
        if self.mix.method != "random" and not self.options.batch_size:
            raise InvalidArgumentError(
                f"batching_method={self.mix.method!r} cuts epochs into batches, so it needs batch_size (samples "
                "per device per step): set it on the dataset, or read through StreamingDataLoader(batch_size=...)")
        super().check(world)

    def fresh(self, epoch: int, world: World) -> Pass:
        return Pass(epoch, self._epoch(self.spec(world), epoch, self.global_batch(world)), 0, world)

    def resume(self, point: ResumePoint, world: World) -> Optional[Pass]:
        g = self.global_batch(world)
        unit = point.raw.get("mixing_unit")
        device = unit if self.mix.method == "device_per_stream" else self.options.batch_size or 1
        if point.position == 0:  # nothing consumed yet: the epoch starts afresh with this run's batches
            return self.fresh(point.epoch, world)
        plan = self.mixture(self.spec(world)).epoch(point.epoch, point.global_batch, device, point.origin)
        if point.position >= plan.end:
            return None
        self._check_unit(point, plan, g)
        position = point.position
        # on the same global batch the pass continues the saved plan, inside a step too
        if g != plan.global_batch and plan.resume_unit and position % plan.resume_unit:
            position -= position % plan.resume_unit
            warnings.warn(
                f"the state is {point.position - position} samples into a unit of {plan.resume_unit} "
                f"(batching_method={plan.method!r} reads whole units); resuming at the unit's start, "
                f"sample {position}, so those samples are read again", stacklevel=4)
        return Pass(point.epoch, plan.resume(position, g), position, world)

    def _check_unit(self, point: ResumePoint, plan: MixedEpoch, g: int) -> None:
        unit = plan.resume_unit
        if unit is None:
            return
        now = g if plan.method in ("stratified", "per_stream") else (self.options.batch_size or 1)
        if now != unit:
            what = "device batch (batch_size)" if plan.method == "device_per_stream" else "global batch"
            raise IncompatibleStateError(
                f"batching_method={plan.method!r} cuts the epoch into units of one {what}: the state was saved "
                f"with {unit} samples and this run has {now}. Resume with the same {what} to finish epoch "
                f"{point.epoch} (any number of ranks with it), or start the next epoch (set_epoch) with the new one")

    def _state(self, epoch: int, position: int, plan: MixedEpoch, spec: PlanSpec) -> dict:
        state = make_state(epoch=epoch, position=position, global_batch=plan.global_batch, origin=plan.origin,
                           base=None, settings=self.settings(spec), dataset=self.dataset,
                           initial_physical_nodes=self.initial_physical_nodes or 1)
        state["mixture"] = self.description
        state["mixing_unit"] = plan.resume_unit
        return state

    def _check_point(self, point: ResumePoint, spec: PlanSpec) -> None:
        raw = point.raw
        unit = raw.get("mixing_unit")
        if unit is not None and (isinstance(unit, bool) or not isinstance(unit, int) or unit < 1):
            raise IncompatibleStateError(f"state key 'mixing_unit' must be null or an int >= 1, got {unit!r}")
        if "mixture" not in raw:
            raise IncompatibleStateError(
                "the state was saved by a dataset read from one stream, and this dataset mixes streams; "
                "resume with the dataset the state was saved for")
        if raw["mixture"] != self.description:
            diffs = [f"{k}: state has {raw['mixture'].get(k)!r}, this dataset has {v!r}"
                     for k, v in self.description.items() if raw["mixture"].get(k) != v]
            raise IncompatibleStateError(
                f"the state was saved for another mixture ({'; '.join(diffs) or 'different keys'}); "
                "build the dataset with the same streams, weights and methods to resume")


def mixed_order(sources, options, fingerprint: str, epoch_size: Optional[int], schedule) -> MixedOrder:
    """The order of a mixed dataset over opened stream ``sources`` (see :mod:`.stream`)."""
    sizes = [np.asarray([s.samples for s in src.shards], np.int64) for src in sources]
    samples = np.asarray([int(x.sum()) for x in sizes], np.int64)
    choose, plan_schedule, size = resolve_weights([src.stream for src in sources], samples, epoch_size, schedule)
    if choose is not None:
        weights = {"choose": choose.tolist()}
    elif schedule is not None:
        weights = {"schedule": schedule.describe(), "epoch_size": size}
    else:
        weights = {"proportions": plan_schedule.vec[0].tolist(), "epoch_size": size}
    description = {
        "streams": [{"samples": int(n), "shards": int(x.size)} for n, x in zip(samples, sizes)],
        "weights": weights,
        "batching_method": options.batching_method,
        "sampling_method": options.sampling_method,
        "sampling_granularity": options.sampling_granularity,
    }
    order = MixedOrder(sizes, options, fingerprint, choose=choose, schedule=plan_schedule, epoch_size=size,
                     description=description)
    order.stream_samples = samples
    return order

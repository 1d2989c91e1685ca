"""The order of one dataset's epochs: a strategy of the :class:`~.cursor.EpochCursor`.

``SingleOrder`` turns an epoch, or a resumption point, into a :class:`~.cursor.Pass` over
the dataset's lazy plan (built once per plan settings and cached) and a position of a pass
into a state dict; it resolves the plan settings that depend on the run (the number of
canonical nodes, from the first world or from a loaded state). It keeps no notion of the
current pass: the cursor does.
"""

from __future__ import annotations

import numpy as np

from ..errors import IncompatibleStateError, InvalidArgumentError
from ..plan import EpochPlan, Plan, PlanSpec, World
from .cursor import Pass
from .state import ResumePoint, make_state, parse_state


class SingleOrder:
    def __init__(self, shard_sizes: np.ndarray, options, fingerprint: str) -> None:
        self.sizes = shard_sizes
        self.options = options
        self.dataset = {"num_samples": int(shard_sizes.sum()), "num_shards": int(shard_sizes.size),
                        "shard_sizes_xxh64": fingerprint}
        self.initial_physical_nodes: int | None = None
        self.adopted_canonical: int | None = None  # num_canonical_nodes taken from a loaded state
        self._plans: dict[PlanSpec, Plan] = {}

    @property
    def epoch_size(self) -> int:
        return self.dataset["num_samples"]

    # -- settings ------------------------------------------------------------------------
    def canonical_nodes(self, world: World) -> int:
        if self.options.num_canonical_nodes:
            return self.options.num_canonical_nodes
        if self.adopted_canonical:
            return self.adopted_canonical
        if self.initial_physical_nodes is None:
            self.initial_physical_nodes = world.num_nodes
        per_node = 64 if self.options.shuffle_algo in ("py1s", "py2s") else 1
        return per_node * self.initial_physical_nodes

    def spec(self, world: World) -> PlanSpec:
        return self._spec_with(self.canonical_nodes(world))

    def settings(self, spec: PlanSpec) -> dict:
        return {"shuffle": spec.shuffle, "shuffle_algo": spec.algo, "shuffle_seed": spec.seed,
                "shuffle_block_size": spec.resolved_block_size, "num_canonical_nodes": spec.num_canonical_nodes,
                "epoch_tail": spec.tail}

    def _check_partition(self, spec: PlanSpec, world: World) -> None:
        """``orig`` keeps every node on whole canonical nodes (or whole fractions of one)."""
        c, p = spec.num_canonical_nodes, world.num_nodes
        if self.options.partition_algo == "orig" and c % p and p % c:
            raise InvalidArgumentError(
                f"partition_algo='orig' needs num_canonical_nodes ({c}) to be a multiple or a divisor of the "
                f"number of physical nodes ({p}); use partition_algo='relaxed' to run on this world anyway "
                "(the order is the same; only the download locality is partial)"
            )

    def plan(self, spec: PlanSpec) -> Plan:
        plan = self._plans.get(spec)
        if plan is None:
            self._plans = {spec: Plan(self.sizes, spec)}  # one cached plan: settings rarely change
            plan = self._plans[spec]
        return plan

    def _check_mosaic(self, spec: PlanSpec) -> None:
        """With ``epoch_tail="mosaic"``, what mosaicml-streaming refuses when an epoch starts is refused too."""
        if spec.tail != "mosaic":
            return
        if not isinstance(self.options.batch_size, int):
            raise InvalidArgumentError(
                "Please pass `batch_size` to StreamingDataset. It should be set the same as the DataLoader, and is "
                "the number of samples per batch, for each device: epoch_tail='mosaic' sizes epochs in batches as "
                "mosaicml-streaming does, so it is not taken from the loader")
        samples = int(self.sizes.sum())
        if spec.shuffle and spec.algo == "py1e" and samples < spec.num_canonical_nodes:
            raise InvalidArgumentError(
                f"The number of samples assigned to a canonical node is 0: the dataset has {samples} sample(s) and "
                f"num_canonical_nodes={spec.num_canonical_nodes}. With epoch_tail='mosaic' such a dataset is refused "
                "as mosaicml-streaming refuses it; reduce num_canonical_nodes (or use epoch_tail='pad')")

    def global_batch(self, world: World) -> int:
        return (self.options.batch_size or 1) * world.readers

    def check(self, world: World) -> None:
        """Refuse a world the settings cannot plan for (before anything is started)."""
        self._check_partition(self.spec(world), world)

    # -- passes --------------------------------------------------------------------------
    def fresh(self, epoch: int, world: World) -> Pass:
        """Epoch ``epoch`` from its start."""
        self._check_mosaic(self.spec(world))
        return Pass(epoch, self.plan(self.spec(world)).epoch(epoch, self.global_batch(world), world=world), 0, world)

    def resume(self, point: ResumePoint, world: World):
        """The pass that continues ``point``, or None if its epoch was complete."""
        plan = self.plan(self.spec(world))
        self._check_mosaic(plan.spec)
        if plan.spec.tail == "mosaic":  # sized from the samples consumed, for this world
            segment = plan.epoch(point.epoch, self.global_batch(world), point.position, world=world)
            return Pass(point.epoch, segment, point.position, world) if segment.steps else None
        segment = plan.epoch(point.epoch, point.global_batch, point.origin, point.base)
        if point.position < segment.end:
            return Pass(point.epoch, segment.resume(point.position, self.global_batch(world)), point.position, world)
        return None

    def state(self, epoch: int, position: int, plan: EpochPlan) -> dict:
        return self._state(epoch, position, plan, plan.plan.spec)

    def _state(self, epoch: int, position: int, plan: EpochPlan, spec: PlanSpec) -> dict:
        # the segment that holds `position`, so the state can be resumed with any global batch
        return make_state(epoch=epoch, position=position, global_batch=plan.global_batch, origin=plan.origin,
                          base=plan.base, settings=self.settings(spec), dataset=self.dataset,
                          initial_physical_nodes=self.initial_physical_nodes or 1)

    def adopt(self, obj: dict, world: World) -> ResumePoint:
        """Validate state ``obj`` for this dataset and take the run settings it fixes."""
        if not self.options.num_canonical_nodes and "num_canonical_nodes" in obj:
            # not chosen by the user: the state's value (set by the initial run) wins
            canonical = obj["num_canonical_nodes"]
            if isinstance(canonical, bool) or not isinstance(canonical, int) or canonical < 1:
                raise IncompatibleStateError(f"state key 'num_canonical_nodes' must be an int >= 1, got {canonical!r}")
            spec = self._spec_with(canonical)
        else:
            spec = self.spec(world)
        point = parse_state(obj, self.settings(spec), self.dataset)
        self._check_point(point, spec)
        self.initial_physical_nodes = point.initial_physical_nodes
        if not self.options.num_canonical_nodes:
            self.adopted_canonical = spec.num_canonical_nodes
        return point

    def _check_point(self, point: ResumePoint, spec: PlanSpec) -> None:
        if "mixture" in point.raw:
            raise IncompatibleStateError(
                "the state was saved by a dataset mixed from streams, and this dataset reads one; "
                "resume with the dataset the state was saved for")
        regions = self.plan(spec).num_regions
        if point.base is not None and len(point.base) != regions:
            raise IncompatibleStateError(f"state key 'region_base' has {len(point.base)} entries, expected {regions}")

    def epoch_plan(self, epoch: int, world: World):
        """The plan of ``epoch`` for ``world``."""
        return self.plan(self.spec(world)).epoch(epoch, self.global_batch(world), world=world)

    def _spec_with(self, canonical: int) -> PlanSpec:
        o = self.options
        return PlanSpec(shuffle=o.shuffle, algo=o.shuffle_algo, seed=o.shuffle_seed, num_canonical_nodes=canonical,
                        block_size=o.shuffle_block_size, tail=o.epoch_tail)


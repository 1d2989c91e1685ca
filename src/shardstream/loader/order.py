"""The dataset's side of epoch planning: which epoch is next, where it starts, what was consumed.

``Order`` owns the plan of one dataset (built lazily, cached), the epoch counter,
a pending resumption state and the bookkeeping of the iteration in progress. It
turns ``state_dict`` / ``load_state_dict`` into plan segments and back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import IncompatibleStateError, InvalidArgumentError
from ..plan import EpochPlan, Plan, PlanSpec, World
from .state import ResumePoint, decode_state, make_state, parse_state


@dataclass
class Pass:
    """One call of ``iterate``: its epoch, plan segment, start position and world."""

    epoch: int
    plan: EpochPlan
    start: int
    world: World
    yielded: int = 0


class Order:
    def __init__(self, shard_sizes: np.ndarray, options, fingerprint: str) -> None:
        self.sizes = shard_sizes
        self.options = options
        self.dataset = {"num_samples": int(shard_sizes.sum()), "num_shards": int(shard_sizes.size),
                        "shard_sizes_xxh64": fingerprint}
        self.next_epoch = 0
        self.initial_physical_nodes: int | None = None
        self.pending: ResumePoint | None = None
        self.current: Pass | None = None
        self.adopted_canonical: int | None = None  # num_canonical_nodes taken from a loaded state
        self._plans: dict[PlanSpec, Plan] = {}

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

    def global_batch(self, world: World) -> int:
        return (self.options.batch_size or 1) * world.readers

    # -- passes --------------------------------------------------------------------------
    def begin(self, world: World) -> Pass:
        """Start the next pass: the pending resume point if any, else the next epoch from 0."""
        current = self.upcoming(world)
        self.pending = None
        self.next_epoch = current.epoch + 1
        self.current = current
        return current

    def upcoming(self, world: World) -> Pass:
        """The pass the next ``begin`` would start, without starting it."""
        g = self.global_batch(world)
        spec = self.spec(world)
        self._check_partition(spec, world)
        plan = self.plan(spec)
        point = self.pending
        epoch = self.next_epoch
        if point is not None:
            segment = plan.epoch(point.epoch, point.global_batch, point.origin, point.base)
            if point.position < segment.end:
                return Pass(point.epoch, segment.resume(point.position, g), point.position, world)
            epoch = point.epoch + 1  # the saved epoch was complete
        return Pass(epoch, plan.epoch(epoch, g), 0, world)

    # -- state -----------------------------------------------------------------------------
    def state_dict(self, num_samples: int | None, from_beginning: bool, world: World) -> dict:
        """The state after ``num_samples`` of the pass in progress (or of the upcoming one,
        in a process that does not iterate itself, such as a DataLoader's main process)."""
        cur = self.current
        if cur is None:
            cur = self.upcoming(world)
            if num_samples is None:
                return self._state(cur.epoch, cur.start, cur.plan, cur.plan.plan.spec)
        if num_samples is None:
            position = cur.start + self._consumed(cur)
        else:
            if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)) or num_samples < 0:
                raise InvalidArgumentError(f"num_samples={num_samples!r} must be an int >= 0")
            position = int(num_samples) if from_beginning else cur.start + int(num_samples)
        if position < cur.plan.origin:
            raise InvalidArgumentError(
                f"num_samples={num_samples} puts the position ({position}) before this pass's start "
                f"({cur.plan.origin}); with a resumed run count from_beginning=False or add the start"
            )
        position = min(position, cur.plan.end)
        return self._state(cur.epoch, position, cur.plan, cur.plan.plan.spec)

    def _consumed(self, cur: Pass) -> int:
        """Global positions consumed, from what this process yielded (one worker per rank only)."""
        if cur.world.workers > 1:
            raise InvalidArgumentError(
                "this process cannot see what DataLoader workers consumed; pass num_samples (the number of "
                "samples the whole job consumed this epoch) to state_dict()"
            )
        bs = cur.plan.device_batch(cur.world)
        if cur.world.readers == 1:
            return cur.yielded
        return (cur.yielded // bs) * cur.plan.global_batch  # whole global steps, ranks in lockstep

    def _state(self, epoch: int, position: int, plan: EpochPlan, spec: PlanSpec) -> dict:
        # the segment that holds `position`, so the state can be resumed with any global batch
        return make_state(epoch=epoch, position=position, global_batch=plan.global_batch, origin=plan.origin,
                          base=plan.base, settings=self.settings(spec), dataset=self.dataset,
                          initial_physical_nodes=self.initial_physical_nodes or 1)

    def load_state_dict(self, obj, world: World) -> None:
        obj = decode_state(obj)
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
        self.pending = point
        self.next_epoch = point.epoch
        self.current = None

    def _check_point(self, point: ResumePoint, spec: PlanSpec) -> None:
        if "mixture" in point.raw:
            raise IncompatibleStateError(
                "the state was saved by a dataset mixed from streams, and this dataset reads one; "
                "resume with the dataset the state was saved for")
        regions = self.plan(spec).num_regions
        if point.base is not None and len(point.base) != regions:
            raise IncompatibleStateError(f"state key 'region_base' has {len(point.base)} entries, expected {regions}")

    def epoch_plan(self, epoch: int | None, world: World):
        """The plan of ``epoch`` (default: the next) for ``world``."""
        return self.plan(self.spec(world)).epoch(self.next_epoch if epoch is None else epoch, self.global_batch(world))

    def _spec_with(self, canonical: int) -> PlanSpec:
        o = self.options
        return PlanSpec(shuffle=o.shuffle, algo=o.shuffle_algo, seed=o.shuffle_seed, num_canonical_nodes=canonical,
                        block_size=o.shuffle_block_size, tail=o.epoch_tail)


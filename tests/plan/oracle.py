"""Helpers shared by the plan tests: answers computed by materialising small epochs."""

from __future__ import annotations

import numpy as np

from shardstream.plan.shuffle import naive


def sample_regions(ep) -> np.ndarray:
    """The region of every sample id: the region of its place in the epoch's virtual sequence."""
    run = ep.plan.run
    n = ep.plan.num_samples
    v = np.arange(n)
    spec = ep.plan.spec
    ids = naive(v, n, ep.key) if spec.shuffle and spec.algo == "naive" else ep.layout.sample_ids(v)
    out = np.empty(n, np.int64)
    out[ids] = np.searchsorted(run.region_bounds, v, side="right") - 1
    return out

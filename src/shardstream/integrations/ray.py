"""Ray Data <-> MDS: write a Ray Dataset as MDS shards, read an MDS dataset as a Ray Dataset.

- :class:`MDSDatasink`: ``ds.write_datasink(MDSDatasink("s3://bucket/train"))``;
- :class:`MDSDatasource`: ``ray.data.read_datasource(MDSDatasource("s3://bucket/train"))``;
- :func:`read_mds`: the same in one call, ``read_mds(url, override_num_blocks=8)``.

Ray is an optional dependency: ``pip install 'shardstream[ray]'``. See ``docs/ray.md``.
"""

from __future__ import annotations

from ..errors import require

require("ray.data", "ray", "the Ray Data integration (shardstream.integrations.ray)")
require("pyarrow", "ray", "the Ray Data integration (shardstream.integrations.ray)")

from .raysink import MDSDatasink  # noqa: E402
from .raysource import MDSDatasource, read_mds  # noqa: E402

__all__ = ["MDSDatasink", "MDSDatasource", "read_mds"]

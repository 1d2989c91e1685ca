"""Small datasets for tests and examples, written in one call by a real :class:`MDSWriter`."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, Union

from ..writing.mdswriter import MDSWriter


def write_dataset(out: Union[str, os.PathLike], columns: dict[str, str], samples: Iterable[dict[str, Any]],
                  **writer_kwargs: Any) -> str:
    """Write ``samples`` into a dataset at ``out`` (a directory or an fsspec URL) and return ``out``.

    ``writer_kwargs`` are :class:`MDSWriter`'s (``size_limit``, ``compression``, ``hashes``,
    ``exist_ok`` ...). As with the writer itself, no index is written if ``samples`` raises.

    Example::

        path = write_dataset(tmp_path / "ds", {"id": "int"}, ({"id": i} for i in range(100)), size_limit=500)
    """
    out = os.fspath(out)
    with MDSWriter(out=out, columns=columns, **writer_kwargs) as writer:
        for sample in samples:
            writer.write(sample)
    return out

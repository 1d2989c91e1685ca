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


def write_text_rows(dirname: Union[str, os.PathLike], files: int = 3, rows: int = 200, start: int = 0) -> str:
    """JSON Lines files ``part<f>.jsonl`` in ``dirname`` of rows ``{"id", "text"}``: row ``i`` of file ``f`` has
    id ``start + 1000 * f + i`` and a text of ``i % 13 + 1`` words; returns ``dirname``."""
    import json

    dirname = os.fspath(dirname)
    os.makedirs(dirname, exist_ok=True)
    for f in range(files):
        with open(os.path.join(dirname, f"part{f}.jsonl"), "w") as fh:
            for i in range(rows):
                rid = start + f * 1000 + i
                fh.write(json.dumps({"id": rid, "text": " ".join(f"w{rid}" for _ in range(i % 13 + 1))}) + "\n")
    return dirname

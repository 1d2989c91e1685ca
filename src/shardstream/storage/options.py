"""How one stream is read from its store: its split, download retries and timeout, digest,
whether compressed files are kept, and its format of shards. Validated once, when made."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from ..errors import InvalidArgumentError
from ..format.hashing import check_hash
from ..format.source import get_format

LOCK_SLACK = 60  # seconds a process waits for another one's download beyond that download's own time limit
DEFAULT_DOWNLOAD_RETRY = 2  # attempts after the first
DEFAULT_DOWNLOAD_TIMEOUT = 60  # seconds per attempt


@dataclass(frozen=True)
class StreamOptions:
    """One stream's reading options (a :class:`~shardstream.Stream` leaves out those it takes from the dataset)."""

    split: Optional[str] = None
    download_retry: int = DEFAULT_DOWNLOAD_RETRY
    download_timeout: float = DEFAULT_DOWNLOAD_TIMEOUT
    validate_hash: Optional[str] = None
    keep_zip: bool = False
    format: Optional[str] = None  # None: from the files' names, or MDS for a directory with index.json
    columns: Optional[tuple] = None  # the columns read from data files (all when None)
    on_bad_rows: str = "raise"  # a row of a text file that cannot be parsed: "raise" or "skip"

    def __post_init__(self) -> None:
        retry = self.download_retry
        if isinstance(retry, bool) or not isinstance(retry, int) or retry < 0:
            raise InvalidArgumentError(f"download_retry={retry!r} must be an int >= 0")
        timeout = self.download_timeout
        if not isinstance(timeout, (int, float)) or timeout <= 0:
            raise InvalidArgumentError(f"download_timeout={timeout!r} must be a positive number of seconds")
        if self.validate_hash:
            check_hash(self.validate_hash)
        if self.format is not None:
            get_format(self.format)  # an unknown name is refused with the known ones
        if self.columns is not None:
            cols = self.columns
            if isinstance(cols, str) or not all(isinstance(c, str) for c in cols) or not cols:
                raise InvalidArgumentError(f"columns={cols!r} must be a non-empty list of column names")
            object.__setattr__(self, "columns", tuple(cols))
        if self.on_bad_rows not in ("raise", "skip"):
            raise InvalidArgumentError(f"on_bad_rows={self.on_bad_rows!r} must be 'raise' or 'skip'")

    @property
    def lock_wait(self) -> float:
        """Seconds to wait for another process's download of a shard: every attempt it may make, and a minute."""
        return self.download_timeout * (self.download_retry + 1) + LOCK_SLACK

    def with_overrides(self, **values: Any) -> "StreamOptions":
        """These options with ``values`` in place of the current ones; a value of None keeps the current one."""
        fields = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(values) - fields)
        if unknown:
            raise InvalidArgumentError(
                f"StreamOptions has no option {unknown[0]!r}; it has {', '.join(sorted(fields))}")
        changed = {k: v for k, v in values.items() if v is not None and v != getattr(self, k)}
        return dataclasses.replace(self, **changed) if changed else self  # validated once, when nothing changes

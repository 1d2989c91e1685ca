"""Fixtures of the compatibility tests: the interpreter of the peer virtualenv (with mosaicml-streaming)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def peer_python() -> str:
    """The peer interpreter; fails (never skips) when it is not there."""
    configured = os.environ.get("SHARDSTREAM_PEER_PYTHON")
    path = Path(configured) if configured else REPO_ROOT / ".venv-peers" / "bin" / "python"
    if not path.exists():
        pytest.fail(f"the peer virtualenv with mosaicml-streaming is missing ({path}); run `make peers` or set "
                    "SHARDSTREAM_PEER_PYTHON", pytrace=False)
    return str(path)

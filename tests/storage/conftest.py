"""Fixtures that run loopback object stores for the storage tests.

- ``s3_server`` (session): a moto :class:`~shardstream.testing.servers.S3Server`;
  ``s3_bucket`` (function): a fresh bucket on it, as ``"s3://<name>"``;
- ``s3_proxy`` (function): a started :class:`~shardstream.testing.servers.FaultProxy` in front of
  ``s3_server``; route s3fs through it with ``s3fs.S3FileSystem(skip_instance_cache=True,
  **s3_proxy.storage_options)`` and inject failures with ``s3_proxy.faults.add(...)``;
- ``http_server`` (function): a :class:`~shardstream.testing.servers.RangeHTTPServer` over an empty
  temporary directory (``http_server.root``); write files there and read ``f"{http_server.url}/name"``;
- ``gcs_server`` (session) / ``gcs_bucket`` (function, ``"gs://<name>"``): fake-gcs-server;
- ``azurite_server`` (session) / ``azure_container`` (function, ``"az://<name>"``): Azurite, skipped
  unless the ``azurite-blob`` executable (``AZURITE_BIN`` or ``PATH``) and ``adlfs`` are installed.

With pytest-xdist every worker starts its own servers; buckets live until the session ends.
"""

from __future__ import annotations

import os

# gcsfs picks its filesystem class when first imported; the experimental one stalls against an emulator.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

import pytest

from shardstream.testing.servers import (
    AzuriteServer,
    GCSServer,
    RangeHTTPServer,
    S3Server,
    ServerUnavailable,
    unique_name,
)


@pytest.fixture(scope="session")
def s3_server():
    with S3Server() as server:
        yield server


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> str:
    return s3_server.make_bucket(unique_name())


@pytest.fixture
def s3_proxy(s3_server: S3Server):
    with s3_server.proxy() as proxy:
        yield proxy


@pytest.fixture
def http_server(tmp_path):
    root = tmp_path / "http-root"
    root.mkdir()
    with RangeHTTPServer(root) as server:
        yield server


@pytest.fixture(scope="session")
def gcs_server():
    with GCSServer() as server:
        yield server


@pytest.fixture
def gcs_bucket(gcs_server: GCSServer) -> str:
    return gcs_server.make_bucket(unique_name())


@pytest.fixture(scope="session")
def azurite_server():
    pytest.importorskip("adlfs", reason="Azure tests need adlfs: pip install adlfs")
    server = AzuriteServer()
    try:
        server.start()
    except ServerUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def azure_container(azurite_server: AzuriteServer) -> str:
    return azurite_server.make_bucket(unique_name())


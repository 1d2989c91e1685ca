"""Progress of long operations: bars when shown (forced, or on a real terminal), nothing otherwise, and
a summary line at the end, always logged.

Downloads come from a real HTTP range server on 127.0.0.1; terminals are real pseudo-terminals
(``pty``) around a ``python -m shardstream`` process; "tqdm absent" is a process whose first line makes
``import tqdm`` fail."""

from __future__ import annotations

import fcntl
import io
import logging
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest

import shardstream
from shardstream.format.lineindex import INDEX_PROGRESS_FROM, blocks
from shardstream.progress import ENV, Progress
from shardstream.storage.fetch import Fetcher
from shardstream.testing.servers import RangeHTTPServer

MIB = 1 << 20
NO_TQDM = "import sys; sys.modules['tqdm'] = None; "


@pytest.fixture(autouse=True)
def _no_forcing(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)  # what the user's shell says must not decide these tests


@pytest.fixture
def dataset(tmp_path, make_dataset):
    return make_dataset(tmp_path, {"id": "int", "text": "str"},
                        [{"id": i, "text": f"row {i}"} for i in range(200)], size_limit=600)


def _env(**more) -> dict:
    env = {k: v for k, v in os.environ.items() if k != ENV}
    return {**env, **more}


def _on_terminal(code: str, env: dict) -> str:
    """What ``python -c code`` writes on a real terminal (100 columns, 24 rows)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    out = b""
    try:
        while True:
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            out += data
    finally:
        os.close(master)
        proc.wait(timeout=120)
    assert proc.returncode == 0, out
    return out.decode(errors="replace")


def test_quiet_off_a_terminal_but_the_summary_is_logged(caplog):
    stream = io.StringIO()
    with caplog.at_level(logging.INFO, logger="shardstream"):
        with Progress("count", 10, "things", stream=stream) as p:
            for _ in range(10):
                p.update()
    assert stream.getvalue() == ""
    assert [r.getMessage() for r in caplog.records] == [p.summary()]
    assert p.summary().startswith("count: 10 things in ")


def test_forced_draws_a_bar_and_the_summary():
    stream = io.StringIO()
    p = Progress("count", 4, "things", show=True, stream=stream)
    p.update(4)
    text = p.finish("counted 4 things")
    out = stream.getvalue()
    assert out.endswith("counted 4 things\n") and text == "counted 4 things"
    assert "count [" + "#" * 30 + "] 4/4 things" in out


def test_an_abandoned_operation_has_no_summary(caplog):
    stream = io.StringIO()
    with caplog.at_level(logging.INFO, logger="shardstream"):
        with pytest.raises(KeyError):
            with Progress("count", 4, "things", show=True, stream=stream) as p:
                p.update(1)
                raise KeyError("boom")
    assert "1/4 things" in stream.getvalue() and "count:" not in stream.getvalue()
    assert caplog.records == []


def test_the_environment_forces_or_silences(monkeypatch):
    stream = io.StringIO()
    monkeypatch.setenv(ENV, "1")
    Progress("count", 1, stream=stream).finish("done")
    assert stream.getvalue().endswith("done\n")
    monkeypatch.setenv(ENV, "0")
    assert not Progress("count", 1, stream=stream).shown
    assert Progress("count", 1, show=True, stream=stream).shown  # an explicit choice wins
    monkeypatch.setenv(ENV, "sometimes")
    with pytest.raises(shardstream.InvalidArgumentError, match="SHARDSTREAM_PROGRESS='sometimes'") as info:
        Progress("count", 1, stream=stream)
    assert isinstance(info.value, ValueError)


def test_a_big_download_shows_progress_when_forced(tmp_path, capsys, caplog):
    served = tmp_path / "served"
    served.mkdir()
    data = os.urandom(3 * MIB)
    (served / "big.bin").write_bytes(data)
    (served / "small.bin").write_bytes(data[:MIB - 1])
    with RangeHTTPServer(served) as srv, caplog.at_level(logging.INFO, logger="shardstream"):
        Fetcher(srv.url, progress=True, progress_from=MIB).fetch("big.bin", str(tmp_path / "got" / "big.bin"))
        forced = capsys.readouterr().err
        Fetcher(srv.url, progress_from=MIB).fetch("big.bin", str(tmp_path / "got" / "again.bin"))
        Fetcher(srv.url, progress=True, progress_from=MIB).fetch("small.bin", str(tmp_path / "got" / "small.bin"))
        quiet = capsys.readouterr().err
    assert (tmp_path / "got" / "big.bin").read_bytes() == data
    assert "download big.bin [" + "#" * 30 + "] 3.0 MiB/3.0 MiB" in forced
    assert "downloaded big.bin: 3.0 MiB in " in forced
    assert quiet == ""  # not a terminal, not forced; and the small file is under the threshold
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("downloaded")]
    assert len(logged) == 2 and all(m.startswith("downloaded big.bin: 3.0 MiB") for m in logged)


def test_download_threshold_is_checked(tmp_path):
    with pytest.raises(shardstream.InvalidArgumentError, match="progress_from=-1"):
        Fetcher(str(tmp_path), progress_from=-1)


def test_verify_progress_forced_and_quiet(dataset):
    forced = subprocess.run([sys.executable, "-m", "shardstream", "verify", "--progress", dataset],
                            capture_output=True, text=True, env=_env(), timeout=120)
    assert forced.returncode == 0, forced.stderr
    shards = shardstream.inspect_dataset(dataset)["shards"]
    assert f"verify [{'#' * 30}] {shards}/{shards} shards" in forced.stderr
    assert f"verify: {shards} shards, 200 samples, " in forced.stderr and "no damage found" in forced.stderr
    quiet = subprocess.run([sys.executable, "-m", "shardstream", "verify", dataset],
                           capture_output=True, text=True, env=_env(), timeout=120)
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout.startswith("OK: ")


def test_verify_dataset_takes_a_callable_or_a_bool(dataset, capsys, caplog):
    seen = []
    with caplog.at_level(logging.INFO, logger="shardstream"):
        report = shardstream.verify_dataset(dataset, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(i + 1, report.shards) for i in range(report.shards)]
    assert capsys.readouterr().err == ""
    assert any(r.getMessage().startswith(f"verify: {report.shards} shards") for r in caplog.records)
    with pytest.raises(shardstream.InvalidArgumentError, match="progress='yes'"):
        shardstream.verify_dataset(dataset, progress="yes")


class _File:
    """A local file as the ranged source that describing a text file reads."""

    def __init__(self, path) -> None:
        self.name, self.url, self.size = os.path.basename(path), str(path), os.path.getsize(path)
        self.path = path

    def read(self, offset: int, length: int) -> bytes:
        with open(self.path, "rb") as f:
            f.seek(offset)
            return f.read(length)

    def open(self):
        return open(self.path, "rb")


def _jsonl(path, nbytes: int) -> None:
    line = b'{"id": 1, "text": "a few words of text in one row"}\n'
    path.write_bytes(line * (nbytes // len(line) + 1))


def test_indexing_lines_shows_progress_when_forced(tmp_path, capsys):
    path = tmp_path / "rows.jsonl"
    _jsonl(path, 3 * MIB)
    src = _File(path)
    assert b"".join(blocks(src, progress=True, progress_from=MIB)) == path.read_bytes()
    err = capsys.readouterr().err
    assert "index rows.jsonl [" in err and "indexed rows.jsonl: 3.0 MiB read to find its rows in " in err
    assert b"".join(blocks(src, progress_from=MIB)) == path.read_bytes()  # not a terminal: quiet
    assert b"".join(blocks(src, progress=True)) == path.read_bytes()  # under the default threshold
    assert capsys.readouterr().err == ""


def test_opening_a_big_jsonl_shows_its_indexing_when_forced(tmp_path):
    path = tmp_path / "big.jsonl"
    _jsonl(path, INDEX_PROGRESS_FROM)
    code = ("import shardstream; "
            f"print(len(shardstream.StreamingDataset(local={str(path)!r}, batch_size=1)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(**{ENV: "1"}),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "indexed big.jsonl: 64.0 MiB read to find its rows in " in proc.stderr
    assert int(proc.stdout) > 0


def test_on_a_terminal_tqdm_draws_the_bar(dataset):
    pytest.importorskip("tqdm")
    out = _on_terminal(f"from shardstream.cli.main import main; main(['verify', {dataset!r}])", _env())
    assert "verify: 100%|" in out and "shards/s]" in out  # tqdm's own layout
    assert "no damage found" in out and "OK: " in out


def test_on_a_terminal_without_tqdm_our_bar(dataset):
    out = _on_terminal(NO_TQDM + f"from shardstream.cli.main import main; main(['verify', {dataset!r}])", _env())
    assert "\rverify [" + "#" * 30 + "]" in out and "100%|" not in out
    assert "no damage found" in out and "OK: " in out

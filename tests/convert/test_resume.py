"""A conversion interrupted (SIGINT, kill -9) and run again finishes with the very bytes of an uninterrupted
one; finished output is left alone; new inputs are appended as new parts; changed inputs or settings are
refused; ``--overwrite`` starts over; an index never lists a part that is not complete."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import shardstream
from shardstream.cli.main import main
from shardstream.errors import ConvertMismatchError

KILL_TIMEOUT = 60  # seconds a run may take to reach the moment it is interrupted


def stamps(dirname) -> dict:
    """relative path -> (inode, mtime in ns) of every file below ``dirname``."""
    found = {}
    for top, _, names in os.walk(str(dirname)):
        for name in names:
            st = os.stat(os.path.join(top, name))
            found[os.path.relpath(os.path.join(top, name), str(dirname))] = (st.st_ino, st.st_mtime_ns)
    return found


def complete_parts(out) -> list[str]:
    return sorted(p for p in os.listdir(out) if p.startswith("part-") and os.path.exists(out / p / "index.json"))


def assert_index_lists_complete_parts(out) -> None:
    """Every part the top-level index lists has its own index, and every shard it lists is there."""
    if not (out / "index.json").exists():
        return
    for shard in json.loads((out / "index.json").read_text())["shards"]:
        basename = shard["raw_data"]["basename"]
        part = basename.split("/", 1)[0]
        assert (out / part / "index.json").exists(), f"index.json lists {part}, which has no index"
        stored = (shard.get("zip_data") or shard["raw_data"])["basename"]
        assert (out / stored).exists(), f"index.json lists {stored}, which is not there"


ARGS = ["--shard-per-input", "--workers", "2", "--compression", "zstd", "--hashes", "xxh64"]


@pytest.fixture(scope="module")
def many(tmp_path_factory, write_parquet):
    """40 Parquet files and an uninterrupted conversion of them (in this process, one worker)."""
    root = tmp_path_factory.mktemp("many")
    rows = write_parquet(root / "in", files=40, rows=600, row_group_size=300)
    shardstream.convert(str(root / "in"), str(root / "reference"), shard_per_input=True, workers=1,
                        compression="zstd", hashes=["xxh64"])
    return root / "in", root / "reference", rows


def start(inputs, out) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "shardstream", "convert", str(inputs), str(out), *ARGS],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def interrupt_midway(proc: subprocess.Popen, out, sig: int, more_than: int = 0) -> int:
    """Send ``sig`` to the run's process group once more than ``more_than`` parts are complete (and not all);
    returns how many were complete then."""
    deadline = time.monotonic() + KILL_TIMEOUT
    while time.monotonic() < deadline:
        done = len(complete_parts(out)) if out.exists() else 0
        if done > more_than:
            os.killpg(proc.pid, sig)
            return done
        assert proc.poll() is None, f"the run ended before it could be interrupted: {proc.communicate()}"
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail(f"no part was complete after {KILL_TIMEOUT}s")


def test_interrupted_runs_finish_byte_identical(many, tmp_path, tree, read_rows, capsys):
    inputs, reference, rows = many
    out = tmp_path / "out"

    proc = start(inputs, out)  # Ctrl-C: the whole foreground process group gets SIGINT
    interrupt_midway(proc, out, signal.SIGINT)
    _, err = proc.communicate(timeout=KILL_TIMEOUT)
    assert proc.returncode == 130, err
    assert "run the same command again to finish" in err
    after_int = complete_parts(out)
    assert 0 < len(after_int) < 40
    assert not (out / "index.json").exists()

    proc = start(inputs, out)
    done = interrupt_midway(proc, out, signal.SIGKILL, more_than=len(after_int))
    proc.wait(timeout=KILL_TIMEOUT)
    assert proc.returncode == -signal.SIGKILL
    assert done < 40, "killed before the end"
    assert_index_lists_complete_parts(out)

    assert main(["convert", str(inputs), str(out), *ARGS]) == 0  # the same command again
    assert "converted" in capsys.readouterr().out
    assert tree(out) == tree(reference)
    assert read_rows(out) == rows


def test_nothing_to_do_changes_nothing(parquet_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["convert", parquet_dir[0], str(out), "--shard-per-input", "--workers", "1", "--quiet"]) == 0
    before = stamps(out)
    time.sleep(0.01)
    assert main(["convert", parquet_dir[0], str(out), "--shard-per-input", "--workers", "1", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "already complete: 150 rows in 3 shards (3 parts); nothing to do" in printed, printed
    assert stamps(out) == before
    result = shardstream.convert(parquet_dir[0], str(out), shard_per_input=True)
    assert result.nothing_to_do and result.rows == 150 and result.parts == 3
    assert stamps(out) == before


def test_new_inputs_are_appended(tmp_path, write_parquet, read_rows):
    inputs, out = tmp_path / "in", tmp_path / "out"
    old = write_parquet(inputs, files=3, rows=40)
    first = shardstream.convert(str(inputs), str(out), shard_per_input=True, workers=1)
    assert (first.parts, first.converted) == (3, 3)
    before = {k: v for k, v in stamps(out).items() if k.startswith("part-")}
    new = write_parquet(inputs, files=2, rows=25, start=1000, prefix="a")  # names sorting first: still appended
    second = shardstream.convert(str(inputs), str(out), shard_per_input=True, workers=1)
    assert (second.parts, second.converted, second.rows) == (5, 2, 170)
    after = stamps(out)
    assert {k: after[k] for k in before} == before, "the old parts' files are untouched"
    assert sorted(p for p in os.listdir(out) if p.startswith("part-")) == [f"part-{i:05d}" for i in range(5)]
    assert read_rows(out) == old + new
    assert_index_lists_complete_parts(out)


def test_changed_inputs_or_settings_refused(parquet_dir, tmp_path, capsys, write_parquet):
    inputs, out = parquet_dir[0], tmp_path / "out"
    assert main(["convert", inputs, str(out), "--quiet"]) == 0
    before = stamps(out)
    assert main(["convert", inputs, str(out), "--compression", "zstd"]) == 2
    assert "was converted with compression=None, and this run asks for 'zstd'" in capsys.readouterr().err
    assert main(["convert", inputs, str(out), "--columns", "id:int"]) == 2
    assert "column_overrides" in capsys.readouterr().err
    write_parquet(inputs, files=1, rows=51)  # f000.parquet rewritten, one row more
    assert main(["convert", inputs, str(out)]) == 2
    err = capsys.readouterr().err
    assert "input f000.parquet changed since it was converted" in err and "--overwrite" in err
    os.unlink(os.path.join(inputs, "f002.parquet"))
    with pytest.raises(ConvertMismatchError, match="f000.parquet changed|f002.parquet"):
        shardstream.convert(inputs, str(out))
    assert stamps(out) == before
    result = shardstream.convert(inputs, str(out), overwrite=True, compression="zstd")
    assert (result.parts, result.converted, result.rows) == (1, 1, 101)
    manifest = json.loads((out / "shardstream-convert.json").read_text())
    assert manifest["settings"]["compression"] == "zstd"


def test_part_without_index_is_redone(tmp_path, write_parquet, tree, read_rows):
    inputs, out = tmp_path / "in", tmp_path / "out"
    rows = write_parquet(inputs, files=3, rows=30)
    shardstream.convert(str(inputs), str(out), shard_per_input=True, workers=1, compression="zstd")
    done = tree(out)
    os.unlink(out / "part-00001" / "index.json")
    (out / "part-00001" / "shard.00007.mds").write_bytes(b"left by a killed run")
    result = shardstream.convert(str(inputs), str(out), shard_per_input=True, workers=1, compression="zstd")
    assert (result.converted, result.parts) == (1, 3)
    assert tree(out) == done
    assert read_rows(out) == rows


def test_new_inputs_in_another_directory_are_appended(tmp_path, write_parquet, read_rows):
    """The inputs' common directory moves up when a new file lands beside the old ones' directory: the files
    converted before are still recognised, and only the new one is converted."""
    top, out = tmp_path / "in", tmp_path / "out"
    old = write_parquet(top / "2026-10", files=2, rows=30)
    pattern = str(top / "*" / "*.parquet")
    first = shardstream.convert(pattern, str(out), workers=1)
    assert first.rows == 60
    new = write_parquet(top / "2026-11", files=1, rows=20, start=500)
    second = shardstream.convert(pattern, str(out), workers=1)
    assert (second.converted, second.rows) == (1, 80)
    assert read_rows(out) == old + new
    assert_index_lists_complete_parts(out)

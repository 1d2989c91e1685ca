"""The examples run end to end (small sizes) and check their own results."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"


def test_jax_example_trains_and_resumes(tmp_path):
    pytest.importorskip("jax")
    out = subprocess.run([sys.executable, str(EXAMPLES / "jax_train.py"), "--samples", "6000", "--dir",
                          str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "identical to an uninterrupted epoch" in out.stdout


def test_jax_example_falls_back_to_numpy(tmp_path):
    code = ("import sys, runpy; sys.modules['jax'] = None; sys.argv = ['jax_train.py', '--samples', '6000', "
            f"'--dir', {str(tmp_path)!r}]; runpy.run_path({str(EXAMPLES / 'jax_train.py')!r}, run_name='__main__')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "identical to an uninterrupted epoch" in out.stdout


def test_demo_streams_from_a_warm_cache_and_leaks_no_semaphores(tmp_path):
    """The demo's second pass over the loopback S3 server reads its cache (nothing downloaded),
    and its crashed training job leaves nothing for multiprocessing's resource tracker: the
    warning the tracker prints for leaked semaphores comes after the demo exits, so stderr is
    read to its end (every process that holds it closed)."""
    pytest.importorskip("moto")
    pytest.importorskip("s3fs")
    out = subprocess.run([sys.executable, str(EXAMPLES / "demo.py"), "--samples", "20000", "--dir",
                          str(tmp_path / "demo")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "leaked" not in out.stderr, out.stderr
    assert "are exactly those of an uninterrupted epoch" in out.stdout, out.stdout
    warm = [line for line in out.stdout.splitlines() if line.strip().startswith("warm cache:")]
    assert len(warm) == 1 and "downloaded 0 files" in warm[0], out.stdout

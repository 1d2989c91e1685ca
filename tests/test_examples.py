"""The examples run end to end (small sizes) and check their own results."""

from __future__ import annotations

import json
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
    pytest.importorskip("tokenizers")
    out = subprocess.run([sys.executable, str(EXAMPLES / "demo.py"), "--samples", "20000", "--dir",
                          str(tmp_path / "demo")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "leaked" not in out.stderr, out.stderr
    assert "are exactly those of an uninterrupted epoch" in out.stdout, out.stdout
    assert "resumed identically:" in out.stdout, out.stdout  # the text section (tokenizers is a demo extra)
    warm = [line for line in out.stdout.splitlines() if line.strip().startswith("warm cache:")]
    assert len(warm) == 1 and "downloaded 0 files" in warm[0], out.stdout


def test_jax_lm_example_trains_a_flax_model_on_packed_text_and_resumes_identically(tmp_path):
    """JSON Lines -> shuffle buffer -> batched Tokenize -> pack(128) -> jax batches into a Flax NNX model;
    a new loader and model resumed from the JSON checkpoint read the uninterrupted run's batches and
    reach its losses (the example exits non-zero otherwise)."""
    for module in ("jax", "flax", "optax", "tokenizers"):
        pytest.importorskip(module)
    out = subprocess.run([sys.executable, str(EXAMPLES / "jax_lm.py"), "--docs", "1500", "--steps", "10",
                          "--save-at", "4", "--dir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "resumed identically: 6 batches compared, equal; losses equal" in out.stdout, out.stdout
    assert "tokens/s" in out.stdout
    assert not list(tmp_path.iterdir()), "the example leaves its temporary directory behind"


def test_demo_text_section_resumes_a_killed_job_identically(tmp_path):
    """The demo's text section: a job checkpointing every step is killed with SIGKILL, a new process resumes
    from its last checkpoint, and its batches and losses are those of the uninterrupted run (the section
    exits non-zero otherwise); the SIGKILL leaves nothing to multiprocessing's resource tracker."""
    pytest.importorskip("tokenizers")
    work = tmp_path / "text"
    out = subprocess.run([sys.executable, str(EXAMPLES / "demo_text.py"), "--steps", "24", "--dir", str(work)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "leaked" not in out.stderr, out.stderr
    assert "killed with SIGKILL; its last checkpoint: step" in out.stdout, out.stdout
    line = next(line for line in out.stdout.splitlines() if "resumed identically" in line)
    compared = int(line.split("resumed identically: ")[1].split()[0])
    assert 0 < compared <= 19, line
    assert not work.exists()


def test_demo_text_checkpoint_names_its_weights_and_resumes_the_training(tmp_path):
    """The checkpoint the text section writes after every step: the JSON names the weights file of its step
    (earlier ones removed, no temporary file left), and training resumed from it makes the uninterrupted
    run's batches and losses."""
    pytest.importorskip("tokenizers")
    sys.path.insert(0, str(EXAMPLES))
    try:
        import demo_text
    finally:
        sys.path.remove(str(EXAMPLES))
    data, tokenizer = demo_text.write_texts(str(tmp_path), docs=600)
    checkpoint = str(tmp_path / "ck.json")
    losses, seen, tokens = demo_text.train(data, tokenizer, 3, checkpoint)
    assert len(losses) == len(seen) == 3 and tokens > 0
    saved = json.loads(pathlib.Path(checkpoint).read_text())
    assert saved["step"] == 3 and pathlib.Path(saved["weights"]).name == "weights-3.npy"
    assert sorted(p.name for p in tmp_path.glob("weights-*")) == ["weights-3.npy"]
    assert not list(tmp_path.glob("*.tmp"))
    resumed_losses, resumed, _ = demo_text.train(data, tokenizer, 5, checkpoint, resume=True)
    reference_losses, reference, _ = demo_text.train(data, tokenizer, 5)
    assert resumed == reference[3:] and len(resumed) == 2
    assert resumed_losses == pytest.approx(reference_losses[3:], rel=1e-5)

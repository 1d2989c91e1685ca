"""``shardstream pipeline run|validate``, run as a real process on YAML files."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("yaml")


def cli(*args, check_rc=None, cwd=None):
    proc = subprocess.run([sys.executable, "-m", "shardstream", "pipeline", *map(str, args)],
                          capture_output=True, text=True, timeout=300, cwd=cwd)
    if check_rc is not None:
        assert proc.returncode == check_rc, (proc.returncode, proc.stdout, proc.stderr)
    return proc


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A directory with JSON Lines documents, a tokenizer.json and a pipeline's YAML file."""
    pytest.importorskip("tokenizers")
    from shardstream.testing.text import generated_texts, tiny_tokenizer

    root = tmp_path_factory.mktemp("project")
    os.makedirs(root / "docs")
    with open(root / "docs" / "part-0.jsonl", "w") as f:
        for i, text in enumerate(generated_texts(150, seed=5)):
            f.write(json.dumps({"id": i, "text": text}) + "\n")
    tiny_tokenizer().save(str(root / "tokenizer.json"))
    (root / "train.yaml").write_text(
        "pipeline:\n"
        "  datasets:\n"
        "    - data_files: docs/*.jsonl\n"
        "      type: jsonl\n"
        "  tokenize:\n"
        "    tokenizer: tokenizer.json\n"
        "  pack:\n"
        "    seq_len: 32\n"
        "  load:\n"
        "    batch_size: 4\n"
        "    shuffle_buffer_size: 50\n")
    return root


def test_validate_prints_the_stages(project):
    out = cli("validate", "train.yaml", cwd=project, check_rc=0).stdout
    assert "OK: train.yaml: 1 dataset(s); stages source -> shuffle -> tokenize -> pack -> load" in out


def test_validate_print_fills_in_the_defaults(project):
    out = cli("validate", "train.yaml", "--print", "--set", "load.batch_size=16", cwd=project, check_rc=0).stdout
    assert "batch_size: 16" in out and "prefetch_buffer_size: 4" in out and "strategy: greedy" in out


def test_a_bad_config_exits_2_with_the_path_of_the_key(project, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("datasets:\n  - data_files: x.jsonl\nload:\n  batchsize: 8\n")
    proc = cli("validate", bad, check_rc=2)
    assert "pipeline.load.batchsize: unknown key; did you mean 'batch_size'?" in proc.stderr
    proc = cli("run", "train.yaml", "--set", "pack.strategy=best", cwd=project, check_rc=2)
    assert "pipeline.pack.strategy: 'best' is not one of the allowed values: 'greedy', 'first_fit'" in proc.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("datasets: [\n")
    assert "not valid YAML" in cli("run", broken, check_rc=2).stderr
    assert "cannot read" in cli("run", tmp_path / "missing.yaml", check_rc=2).stderr


def test_run_iterates_batches_and_prints_the_throughput(project):
    out = cli("run", "train.yaml", "--steps", 5, "--set", "load.batch_size=2", cwd=project, check_rc=0).stdout
    assert "batches 5 in " in out
    assert "batches/s" in out and "tokens/s" in out
    tokens = int(out.split("tokens/s (")[1].split(" tokens")[0])
    assert 0 < tokens <= 5 * 2 * 32


def test_run_with_a_save_stage_writes_the_cache_then_reuses_it(project, tmp_path):
    out_dir = tmp_path / "packed"
    args = ("run", "train.yaml", "--set", f"save.output={out_dir}", "--set", "save.after=pack")
    first = cli(*args, cwd=project, check_rc=0)
    assert f"cache   {out_dir} (written" in first.stdout
    rows = int(first.stdout.split("rows    ")[1].split()[0])
    tokens = int(first.stdout.split("tokens  ")[1].split()[0])
    assert rows > 0 and 0 < tokens <= rows * 32
    assert os.path.exists(out_dir / "shardstream_cache.json")
    second = cli(*args, cwd=project, check_rc=0)
    assert "reused: nothing written" in second.stdout
    assert f"rows    {rows}" in second.stdout
    changed = cli(*args, "--set", "pack.seq_len=16", cwd=project, check_rc=2)
    assert "overwrite" in changed.stderr

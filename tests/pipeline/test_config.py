"""Pipeline configurations: validation with the key's path, dict and YAML round trips, ``--set`` overrides,
and the builder's fixed order of stages."""

from __future__ import annotations

import pytest

from shardstream import (ConfigError, DatasetConfig, LoadStageConfig, MixStageConfig, PackStageConfig, Pipeline,
                         PipelineConfig, SaveStageConfig, TokenizeStageConfig)
from shardstream.pipeline.yamlconfig import apply_overrides

FULL = {
    "datasets": [
        {"data_files": "web/*.jsonl", "type": "jsonl", "name": "web", "weight": 3.0},
        {"data_files": ["code/a.parquet", "code/b.parquet"], "type": "parquet", "name": "code",
         "columns": ["text"], "storage_options": {"anon": True}},
    ],
    "tokenize": {"tokenizer": "tok/tokenizer.json", "max_length": 4096, "truncation": True},
    "mix": {"weights": {"web": 0.7, "code": 0.3}, "seed": 5, "stopping_strategy": "all_exhausted"},
    "pack": {"seq_len": 2048, "strategy": "first_fit", "pad_id": 3},
    "load": {"batch_size": 16, "shuffle_buffer_size": 10000, "seed": 1},
    "save": {"output": "s3://bucket/packed", "after": "tokenize", "overwrite": True},
    "seed": 7,
}


def error(data) -> str:
    with pytest.raises(ConfigError) as info:
        PipelineConfig.from_dict(data)
    assert isinstance(info.value, ValueError)
    return str(info.value)


def test_a_full_config_round_trips_through_dicts():
    config = PipelineConfig.from_dict(FULL)
    assert config.mix.weights == {"web": 0.7, "code": 0.3}
    assert config.datasets[1].columns == ("text",)
    assert PipelineConfig.from_dict(config.to_dict()) == config
    assert PipelineConfig.from_dict({"pipeline": config.to_dict()}) == config


def test_objects_and_mappings_make_the_same_config():
    built = PipelineConfig(
        datasets=[DatasetConfig("web/*.jsonl", type="jsonl", name="web", weight=3.0),
                  DatasetConfig(["code/a.parquet", "code/b.parquet"], type="parquet", name="code", columns=["text"],
                                storage_options={"anon": True})],
        tokenize=TokenizeStageConfig("tok/tokenizer.json", max_length=4096, truncation=True),
        mix=MixStageConfig(weights={"web": 0.7, "code": 0.3}, seed=5, stopping_strategy="all_exhausted"),
        pack=PackStageConfig(2048, strategy="first_fit", pad_id=3),
        load=LoadStageConfig(batch_size=16, shuffle_buffer_size=10000, seed=1),
        save=SaveStageConfig("s3://bucket/packed", after="tokenize", overwrite=True), seed=7)
    assert built == PipelineConfig.from_dict(FULL)


def test_yaml_round_trip(tmp_path):
    pytest.importorskip("yaml")
    config = PipelineConfig.from_dict(FULL)
    path = tmp_path / "pipeline.yaml"
    text = config.to_yaml(str(path))
    assert text.startswith("pipeline:\n") and "batch_size: 16" in text
    assert PipelineConfig.from_yaml(str(path)) == config
    assert Pipeline.from_yaml(str(path)).config == config


def test_a_hand_written_yaml_file(tmp_path):
    pytest.importorskip("yaml")
    path = tmp_path / "train.yaml"
    path.write_text("datasets:\n  - data_files: data/*.parquet\n    type: parquet\n"
                    "load:\n  batch_size: 8\n  shuffle_buffer_size: 10000\n")
    config = PipelineConfig.from_yaml(str(path), ["load.batch_size=32", "datasets[0].weight=2"])
    assert config.load == LoadStageConfig(batch_size=32, shuffle_buffer_size=10000)
    assert config.datasets[0].weight == 2.0


def test_unknown_keys_name_their_path_and_the_closest_key():
    message = error({"datasets": [{"data_files": "x"}], "load": {"batchsize": 3}})
    assert message.startswith("pipeline.load.batchsize: unknown key;")
    assert "did you mean 'batch_size'?" in message and "allowed: batch_size, prefetch_enabled" in message
    message = error({"datasets": [{"data_file": "x"}]})
    assert message.startswith("pipeline.datasets[0].data_file: unknown key; did you mean 'data_files'?")
    assert error({"datasets": [{"data_files": "x"}], "tokenise": {}}).startswith(
        "pipeline.tokenise: unknown key; did you mean 'tokenize'?")
    assert "did you mean" not in error({"datasets": [{"data_files": "x"}], "zzz": 1})


@pytest.mark.parametrize("data,start,words", [
    ({"datasets": [{"data_files": "x", "type": "parket"}]}, "pipeline.datasets[0].type",
     ["'parket' is not one of", "'parquet'", "'hf'"]),
    ({"datasets": [{"data_files": "x"}], "pack": {"seq_len": 8, "strategy": "best"}}, "pipeline.pack.strategy",
     ["'greedy'", "'first_fit'"]),
    ({"datasets": [{"data_files": "x"}], "mix": {"stopping_strategy": "never"}}, "pipeline.mix.stopping_strategy",
     ["'first_exhausted'", "'all_exhausted'"]),
    ({"datasets": [{"data_files": "x"}], "save": {"output": "o", "after": "load"}}, "pipeline.save.after",
     ["'source'", "'tokenize'", "'pack'"]),
])
def test_bad_choices_list_the_allowed_values(data, start, words):
    message = error(data)
    assert message.startswith(start + ": ")
    for word in words:
        assert word in message


@pytest.mark.parametrize("data,start,words", [
    ({"datasets": [{"data_files": "x"}], "load": {"batch_size": "8"}}, "pipeline.load.batch_size",
     ["integer >= 1", "'8' (str)"]),
    ({"datasets": [{"data_files": "x"}], "load": {"drop_last": "yes"}}, "pipeline.load.drop_last",
     ["true or false", "'yes' (str)"]),
    ({"datasets": [{"data_files": "x"}], "pack": {"seq_len": 0}}, "pipeline.pack.seq_len", ["integer >= 1"]),
    ({"datasets": [{"data_files": "x", "weight": -1}]}, "pipeline.datasets[0].weight", ["number >= 0"]),
    ({"datasets": [{"data_files": 5}]}, "pipeline.datasets[0].data_files", ["5 (int)"]),
    ({"datasets": "x"}, "pipeline.datasets", ["non-empty list"]),
    ({"datasets": [{"data_files": "x"}], "load": 8}, "pipeline.load", ["mapping"]),
    ({"datasets": [{"data_files": "x"}], "pack": {}}, "pipeline.pack.seq_len", ["missing"]),
    ({"datasets": [{"data_files": "x"}], "streaming": False}, "pipeline.streaming", ["always streams"]),
    ({"datasets": [{"data_files": "x"}], "tokenize": {"tokenizer": "t", "truncation": True}},
     "pipeline.tokenize.truncation", ["max_length"]),
    ({"datasets": [{"data_files": "x", "type": "mds", "columns": ["a"]}]}, "pipeline.datasets[0].columns",
     ["read whole"]),
    ({"datasets": [{"data_files": "x"}, {"data_files": "y"}], "mix": {"weights": [1]}}, "pipeline.mix.weights",
     ["1 weights for 2 datasets"]),
    ({"datasets": [{"data_files": "x", "name": "a"}, {"data_files": "y", "name": "b"}],
      "mix": {"weights": {"a": 1, "c": 2}}}, "pipeline.mix.weights", ["'c'", "'a', 'b'"]),
    ({"datasets": [{"data_files": "x"}], "mix": {"weights": [1], "schedule": [{"position": 0, "weights": [1]}]}},
     "pipeline.mix.schedule", ["not both"]),
    ({"datasets": [{"data_files": "x"}], "mix": {"schedule": [{"at": 0, "weights": [1]}]}},
     "pipeline.mix.schedule[0]", ["position or step"]),
    ({"datasets": [{"data_files": "x"}], "pack": {"seq_len": 8},
      "mix": {"schedule": [{"step": 10, "weights": [1]}]}}, "pipeline.mix.schedule[0].step", ["position"]),
])
def test_bad_values_name_the_field_the_value_and_what_is_allowed(data, start, words):
    message = error(data)
    assert message.startswith(start + ": "), message
    for word in words:
        assert word in message, message


def test_objects_made_directly_name_their_class():
    with pytest.raises(ConfigError, match=r"^LoadStageConfig\.batch_size: expected an integer >= 1, got 0 \(int\)"):
        LoadStageConfig(batch_size=0)
    with pytest.raises(ConfigError, match=r"^PipelineConfig\.datasets\[0\]\.type: "):
        PipelineConfig(datasets=[{"data_files": "x", "type": "csvv"}])


def test_overrides_set_nested_keys_and_read_values_as_yaml():
    pytest.importorskip("yaml")
    data = {"datasets": [{"data_files": "x"}, {"data_files": "y"}]}
    out = apply_overrides(data, ["load.batch_size=16", "pipeline.load.drop_last=false", "datasets.1.weight=0.5",
                                 "mix.weights=[1, 3]", "save.output=s3://b/p"])
    assert out["load"] == {"batch_size": 16, "drop_last": False}
    assert out["datasets"][1]["weight"] == 0.5 and out["mix"]["weights"] == [1, 3]
    assert out["save"]["output"] == "s3://b/p"
    with pytest.raises(ConfigError, match="key.path=value"):
        apply_overrides(data, ["load.batch_size"])
    with pytest.raises(ConfigError, match="not an index"):
        apply_overrides(data, ["datasets[5].weight=1"])


def alias_bomb(levels: int = 9) -> str:
    """Under a kilobyte of YAML whose aliases stand for 10 ** ``levels`` strings."""
    lines = ['      k0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for i in range(1, levels):
        lines.append(f"      k{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return ("datasets:\n  - data_files: data/*.jsonl\n    storage_options:\n" + "\n".join(lines)
            + f"\n    weight: *a{levels - 1}\n")


BOUNDED_CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
from shardstream import ConfigError, PipelineConfig
from shardstream.pipeline.yamlconfig import apply_overrides
try:
    if sys.argv[2] == "file":
        PipelineConfig.from_yaml(sys.argv[1])
    else:
        PipelineConfig.from_dict(apply_overrides({"datasets": [{"data_files": "x"}]},
                                                 ["mix.weights=" + open(sys.argv[1]).read()]))
    print("accepted")
except ConfigError as exc:
    print("ConfigError", exc)
"""


@pytest.mark.parametrize("how", ["file", "override"])
def test_a_yaml_alias_bomb_is_refused_before_it_expands(tmp_path, how):
    pytest.importorskip("yaml")
    import subprocess
    import sys

    path = tmp_path / "bomb.yaml"
    if how == "file":
        text = alias_bomb()
    else:  # one flow-style value: [[a0, a1, ...]], each a list of ten aliases of the one before
        items = ["&a0 [x, x, x, x, x, x, x, x, x, x]"] + [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]"
                                                        for i in range(1, 9)]
        text = "[[" + ", ".join(items) + "]]"
    path.write_text(text)
    assert len(text) < 1024
    try:  # in a child process limited to 2 GiB and 60 s: an unbounded expansion fails the test, not the machine
        done = subprocess.run([sys.executable, "-c", BOUNDED_CHILD, str(path), how], capture_output=True, text=True,
                              timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("reading the alias bomb ran past the 60 s guard")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("ConfigError") and "more than 100,000 values" in done.stdout, done.stdout
    where = str(path) if how == "file" else "--set 'mix.weights="
    assert where in done.stdout


def test_yaml_aliases_within_the_limit_still_work_and_recursive_ones_are_refused(tmp_path):
    pytest.importorskip("yaml")
    path = tmp_path / "ok.yaml"
    path.write_text("datasets:\n  - {data_files: a/*.jsonl, name: a, storage_options: &opts {anon: true}}\n"
                    "  - {data_files: b/*.jsonl, name: b, storage_options: *opts}\n")
    config = PipelineConfig.from_yaml(str(path))
    assert config.datasets[0].storage_options == config.datasets[1].storage_options == {"anon": True}
    path.write_text("datasets:\n  - data_files: a/*.jsonl\n    storage_options: &loop {inner: *loop}\n")
    with pytest.raises(ConfigError, match="recursive"):
        PipelineConfig.from_yaml(str(path))


def base(**stages) -> PipelineConfig:
    return PipelineConfig.from_dict({"datasets": [{"data_files": "x"}], **stages})


def test_the_built_order_is_fixed_whatever_the_order_of_the_calls():
    config = base(tokenize={"tokenizer": "t.json"}, pack={"seq_len": 8}, load={"shuffle_buffer_size": 10})
    pipeline = Pipeline.from_config(config)
    want = ("source", "shuffle", "tokenize", "pack", "load")
    assert pipeline.stages == want  # nothing called: every stage of the config
    assert pipeline.load().pack().tokenize().source().stages == want
    assert pipeline.source().tokenize().pack().load().stages == want
    assert pipeline.source().load().stages == ("source", "shuffle", "load")
    assert pipeline.source().stages == ("source",)


def test_a_save_stage_sits_after_the_stage_it_names():
    config = base(tokenize={"tokenizer": "t.json"}, pack={"seq_len": 8}, save={"output": "o", "after": "tokenize"},
                  mix={})
    assert Pipeline(config).stages == ("source", "mix", "tokenize", "save", "pack")
    every = Pipeline(config).pack().tokenize().mix()
    assert every.save(after="source").stages == ("source", "mix", "save", "tokenize", "pack")
    assert every.save(after="pack").stages == ("source", "mix", "tokenize", "pack", "save")
    assert every.stages == ("source", "mix", "tokenize", "pack"), "only the stages called are built"
    with pytest.raises(ConfigError, match=r"^pipeline\.save\.after: 'pack', but this pipeline builds no pack stage"):
        Pipeline.from_config(base(save={"output": "o"}))
    with pytest.raises(ConfigError, match="save.after"):
        Pipeline(config).source().save().stages


def test_builder_calls_change_settings_or_use_defaults():
    pipeline = Pipeline.from_config(base())
    assert pipeline.load().config.load == LoadStageConfig()
    assert pipeline.load(batch_size=32).config.load.batch_size == 32
    assert pipeline.mix().config.mix == MixStageConfig()
    assert pipeline.pack(seq_len=16).config.pack == PackStageConfig(16)
    assert pipeline.config.load is None, "a builder call returns a new pipeline"
    with pytest.raises(ConfigError,
                       match=r"^pipeline\.pack: the pipeline has no pack stage; set pipeline\.pack\.seq_len"):
        pipeline.pack()
    with pytest.raises(ConfigError, match=r"pipeline\.tokenize\.tokenizer"):
        pipeline.tokenize()
    with pytest.raises(ConfigError, match=r"pipeline\.save\.output"):
        pipeline.save()
    with pytest.raises(ConfigError, match=r"^pipeline\.load\.batchsize: unknown key; did you mean 'batch_size'"):
        pipeline.load(batchsize=4)
    with pytest.raises(ConfigError, match=r"^pipeline\.load\.batch_size: expected an integer"):
        pipeline.load(batch_size=-1)


def test_configure_changes_settings_without_picking_stages():
    config = base(tokenize={"tokenizer": "t.json"}, pack={"seq_len": 8}, save={"output": "o"})
    changed = Pipeline(config).configure(save={"overwrite": True}, load={"batch_size": 2})
    assert changed.stages == ("source", "tokenize", "pack", "save", "load")
    assert changed.config.save == SaveStageConfig("o", overwrite=True) and changed.config.load.batch_size == 2
    assert Pipeline(config).source().configure(pack={"seq_len": 4}).stages == ("source",)
    with pytest.raises(ConfigError, match=r"^pipeline\.laod: not a stage; did you mean 'load'\?"):
        Pipeline(config).configure(laod={})
    with pytest.raises(ConfigError, match=r"^pipeline\.pack\.seq_len: expected an integer"):
        Pipeline(config).configure(pack={"seq_len": "8"})

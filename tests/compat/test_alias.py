"""Running mosaicml-streaming scripts unchanged: ``python -m shardstream.compat`` and ``install()``,
which never shadow the real package unless asked, and the helpers of ``streaming.base.util``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from .conftest import REPO_ROOT

SRC = str(REPO_ROOT / "src")
STUBS = str(REPO_ROOT / "tests" / "peer_stubs")

SCRIPT = """
import sys, json
import numpy as np
from streaming import MDSWriter, StreamingDataset, LocalDataset
from streaming.base.util import clean_stale_shared_memory
from streaming.base.format.mds.encodings import Encoding, _encodings
clean_stale_shared_memory()

class Complex128(Encoding):
    size = 16
    def encode(self, obj):
        return np.complex128(obj).tobytes()
    def decode(self, data):
        return np.frombuffer(data, np.complex128)[0]

_encodings["complex128"] = Complex128
out = sys.argv[1]
with MDSWriter(out=out, columns={"z": "complex128", "i": "int"}) as w:
    for i in range(12):
        w.write({"z": complex(i, 2), "i": i})
ds = StreamingDataset(local=out, batch_size=4)
print(json.dumps({"argv": sys.argv[1:], "n": len(ds), "third": ds[3]["i"], "z": str(LocalDataset(out)[5]["z"]),
                  "module": StreamingDataset.__module__}))
"""


def _run(args, env_path, python=sys.executable, cwd=None):
    env = {**os.environ, "PYTHONPATH": env_path}
    done = subprocess.run([python, *args], capture_output=True, text=True, env=env, timeout=300, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_script_runs_unchanged_with_python_m(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = _run(["-m", "shardstream.compat", str(script), str(tmp_path / "data"), "--flag"], SRC)
    got = json.loads(out.splitlines()[-1])
    assert got == {"argv": [str(tmp_path / "data"), "--flag"], "n": 12, "third": 3, "z": "(5+2j)",
                   "module": "shardstream.compat.datasets"}


EPOCHS = """
import sys, json
from streaming import MDSWriter, StreamingDataset, StreamingDataLoader
out = sys.argv[1]
with MDSWriter(out=out, columns={"i": "int"}) as w:
    for i in range(117):
        w.write({"i": i})
ds = StreamingDataset(local=out, batch_size=4, num_canonical_nodes=1)
kept = StreamingDataset(local=out, batch_size=4, num_canonical_nodes=1, epoch_tail="pad")
sizes = [len(b["i"]) for b in StreamingDataLoader(ds, batch_size=4, drop_last=True)]
print(json.dumps({"len": len(ds), "read": sum(1 for _ in ds), "kept": sum(1 for _ in kept), "batches": len(sizes),
                  "tail": ds.options.epoch_tail}))
"""


@pytest.mark.parametrize("flag", [[], ["--epoch-tail", "mosaic"], ["--epoch-tail=mosaic"]])
def test_epoch_tail_chosen_for_a_script_run_unchanged(tmp_path, flag):
    script = tmp_path / "epochs.py"
    script.write_text(EPOCHS)
    got = json.loads(_run(["-m", "shardstream.compat", *flag, str(script), str(tmp_path / "d")], SRC).splitlines()[-1])
    if flag:  # mosaicml-streaming's numbers: 117 samples, 29 whole batches of 4 (drop_last drops the short one)
        assert got == {"len": 117, "read": 117, "kept": 120, "batches": 29, "tail": "mosaic"}
    else:  # ours: the epoch is 30 whole batches, the last padded with repeats
        assert got == {"len": 117, "read": 120, "kept": 120, "batches": 30, "tail": "pad"}


def test_a_wrong_epoch_tail_is_refused_with_usage(tmp_path):
    script = tmp_path / "epochs.py"
    script.write_text(EPOCHS)
    done = subprocess.run([sys.executable, "-m", "shardstream.compat", "--epoch-tail", "short", str(script)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": SRC}, timeout=120)
    assert done.returncode == 2 and "epoch_tail='short' is not one of" in done.stderr and "usage:" in done.stderr


def test_python_m_without_a_script_says_how():
    done = subprocess.run([sys.executable, "-m", "shardstream.compat"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": SRC}, timeout=120)
    assert done.returncode == 2 and "usage: python -m shardstream.compat" in done.stderr


def test_the_real_package_is_never_shadowed_unless_asked(peer_python):
    code = textwrap.dedent("""
        import json
        import shardstream, shardstream.compat
        import streaming
        real = streaming.__file__
        try:
            shardstream.compat.install()
            refused = ""
        except ImportError as exc:
            refused = str(exc)
        print(json.dumps({"real": real, "refused": refused}))
    """)
    got = json.loads(_run(["-c", code], f"{SRC}:{STUBS}", python=peer_python).splitlines()[-1])
    assert got["real"].endswith(os.path.join("site-packages", "streaming", "__init__.py"))
    assert "already imported" in got["refused"] and "before the first import" in got["refused"]


def test_install_answers_with_shardstream_and_uninstall_gives_the_real_package_back(peer_python):
    code = textwrap.dedent("""
        import json
        import shardstream.compat
        shardstream.compat.install()
        import streaming
        from streaming.base.format.mds.writer import MDSWriter
        ours = [streaming.StreamingDataset.__module__, MDSWriter.__module__, shardstream.compat.installed()]
        shardstream.compat.uninstall()
        import streaming
        print(json.dumps({"ours": ours, "after": streaming.__file__}))
    """)
    got = json.loads(_run(["-c", code], f"{SRC}:{STUBS}", python=peer_python).splitlines()[-1])
    assert got["ours"] == ["shardstream.compat.datasets", "shardstream.writing.mdswriter", True]
    assert "site-packages" in got["after"]


def test_get_config_matches_the_real_writer(peer_python, tmp_path):
    code = textwrap.dedent(f"""
        import json
        from streaming import MDSWriter
        with MDSWriter(out={str(tmp_path / 'peer')!r}, columns={{"a": "int", "b": "ndarray:float32:2"}},
                       compression="zstd:7", hashes=["sha1", "xxh64"], size_limit=4096) as w:
            print(json.dumps(w.get_config()))
    """)
    theirs = json.loads(_run(["-c", code], STUBS, python=peer_python).splitlines()[-1])
    from shardstream import MDSWriter

    with MDSWriter(out=str(tmp_path / "ours"), columns={"a": "int", "b": "ndarray:float32:2"},
                   compression="zstd:7", hashes=["sha1", "xxh64"], size_limit=4096) as w:
        assert w.get_config() == theirs


def test_the_modules_are_importable_without_the_alias():
    from shardstream.compat.streaming.base.util import bytes_to_int, get_list_arg, number_abbrev_to_int
    from shardstream.compat.streaming.base.stream import streams_registry
    import shardstream

    assert (bytes_to_int("1kb"), bytes_to_int("1.5mb"), bytes_to_int("100b"), bytes_to_int(7)) == (
        1024, 1572864, 100, 7)
    assert (number_abbrev_to_int("2k"), number_abbrev_to_int("1.5b"), number_abbrev_to_int("42")) == (
        2000, 1500000000, 42)
    assert get_list_arg("a,b") == ["a", "b"] and get_list_arg("") == []
    assert streams_registry is shardstream.streams_registry
    with pytest.raises(ValueError):
        bytes_to_int("12 parsecs")
    assert "streaming" not in sys.modules or not getattr(sys.modules["streaming"], "__shardstream_compat__", False)


def test_what_is_not_offered_says_so():
    import shardstream.compat.streaming as streaming

    with pytest.raises(ImportError, match="example datasets"):
        from shardstream.compat.streaming import vision  # noqa: F401
    with pytest.raises(ImportError, match="internals"):
        import shardstream.compat.streaming.base.shared  # noqa: F401
    with pytest.raises(ImportError, match="not offered"):
        streaming.base.Spanner


def test_the_encodings_module_encodes_by_name():
    from shardstream.compat.streaming.base.format.mds import encodings as enc

    assert enc.mds_decode("int", enc.mds_encode("int", -5)) == -5
    assert enc.get_mds_encoded_size("float32") == 4 and enc.get_mds_encoded_size("str") is None
    assert enc.is_mds_encoding("ndarray:int8:2") and not enc.is_mds_encoding("nope")
    assert not enc.is_mds_encoding_safe("pkl") and enc.is_mds_encoding_safe("json")
    assert {"int", "pkl", "jpeg", "list[png]"} <= enc.get_mds_encodings()
    with pytest.raises(ValueError):
        enc.mds_encode("nope", 1)


def test_the_mosaic_default_leaves_mixtures_padded(tmp_path):
    from shardstream import MDSWriter, Stream
    from shardstream.compat.datasets import StreamingDataset, set_epoch_tail

    for name in ("a", "b"):
        with MDSWriter(out=str(tmp_path / name), columns={"i": "int"}) as w:
            for i in range(10):
                w.write({"i": i})
    set_epoch_tail("mosaic")
    try:
        single = StreamingDataset(local=str(tmp_path / "a"), batch_size=4)
        mixed = StreamingDataset(streams=[Stream(local=str(tmp_path / n)) for n in "ab"], batch_size=4)
        chosen = StreamingDataset(local=str(tmp_path / "a"), batch_size=4, epoch_tail="drop")
    finally:
        set_epoch_tail(None)
    assert (single.options.epoch_tail, mixed.options.epoch_tail, chosen.options.epoch_tail) == ("mosaic", "pad", "drop")
    assert StreamingDataset(local=str(tmp_path / "a"), batch_size=4).options.epoch_tail == "pad"

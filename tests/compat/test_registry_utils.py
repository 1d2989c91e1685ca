"""Registries scripts extend the library with: TypedRegistry, create_registry, construct_from_registry,
import_file and save_registry, with no dependency on the catalogue package."""

from __future__ import annotations

import functools
import importlib.metadata
import subprocess
import sys
from importlib.metadata import EntryPoint

import pytest

import shardstream
from shardstream import Stream, StreamingDataset, streams_registry
from shardstream.compat.registry_utils import (TypedRegistry, construct_from_registry, create_registry, import_file,
                                               save_registry)


def test_streams_registry_is_a_typed_registry_named_as_mosaicml_streamings():
    assert isinstance(streams_registry, TypedRegistry)
    assert streams_registry.namespace == ("streaming", "streams_registry")
    assert streams_registry.entry_point_namespace == "streaming_streams_registry"
    assert streams_registry.get("stream") is Stream and "stream" in streams_registry


def test_registries_of_one_namespace_share_their_entries():
    with save_registry():
        first = create_registry("ours", "things", generic_type=str)
        first.register("a", func="alpha")
        second = TypedRegistry(("ours", "things"))
        assert second.get("a") == "alpha" and second.get_all() == {"a": "alpha"}
        first.register("a", func="again")  # a second registration replaces the first
        assert second.get("a") == "again"
        with pytest.raises(ValueError, match="Namespace already exists"):
            create_registry("ours", "things", "a", generic_type=str)
    assert "a" not in TypedRegistry(("ours", "things"))  # put back as it was


def test_an_unknown_name_lists_what_is_registered():
    reg = create_registry("ours", "empty-ish", generic_type=str)
    reg.register("present", func=str)
    with pytest.raises(ValueError, match=r"'absent' is not registered in ours.empty-ish; registered: \['present'\]"):
        reg.get("absent")


def test_entry_points_are_found_by_name_and_win(monkeypatch):
    published = EntryPoint(name="published", value="shardstream:Stream", group="ours_plugins")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda: {"ours_plugins": [published]})
    with save_registry():
        reg = create_registry("ours", "plugins", generic_type=type, entry_points=True)
        assert reg.get("published") is Stream and "published" in reg
        reg.register("published", func=int)  # an installed package's entry point comes first
        assert reg.get("published") is Stream
        closed = create_registry("ours", "plugins", generic_type=type)  # entry points not asked for
        assert closed.get("published") is int and closed.get_entry_points() == {"published": Stream}


def test_construct_builds_classes_and_binds_functions():
    class Tagged(Stream):
        def __init__(self, tag="t"):
            self.tag = tag

    with save_registry():
        reg = create_registry("ours", "builders", generic_type=object)
        reg.register("tagged", func=Tagged)
        reg.register("times", func=lambda x, y: x * y)
        reg.register("make", func=lambda: Tagged("made"))
        reg.register("number", func=7)
        assert construct_from_registry("tagged", reg, kwargs={"tag": "k"}).tag == "k"
        bound = construct_from_registry("times", reg, kwargs={"x": 4})
        assert isinstance(bound, functools.partial) and bound(y=5) == 20
        assert construct_from_registry("make", reg, partial_function=False).tag == "made"
        with pytest.raises(ValueError, match="Expected number to be a class or function"):
            construct_from_registry("number", reg)
        with pytest.raises(ValueError, match="Expected tagged to be of type"):
            construct_from_registry("tagged", reg, pre_validation_function=StreamingDataset)
        seen = []
        construct_from_registry("tagged", reg, pre_validation_function=seen.append,
                                post_validation_function=seen.append)
        assert seen[0] is Tagged and isinstance(seen[1], Tagged)


def test_construct_the_default_stream_from_the_streams_registry(tmp_path):
    made = construct_from_registry("stream", streams_registry, partial_function=False,
                                   kwargs={"local": str(tmp_path)})
    assert isinstance(made, Stream) and made.local == str(tmp_path)


def test_import_file_runs_registrations(tmp_path):
    good = tmp_path / "register.py"
    good.write_text("from shardstream import Stream, streams_registry\n\n"
                    "@streams_registry.register('from_file')\nclass FromFile(Stream):\n    pass\n")
    with save_registry():
        import_file(good)
        assert issubclass(streams_registry.get("from_file"), Stream)
    assert "from_file" not in streams_registry
    bad = tmp_path / "bad.py"
    bad.write_text("undefined_name\n")
    with pytest.raises(RuntimeError, match=r"Error executing .*bad.py: NameError"):
        import_file(bad)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        import_file(tmp_path / "absent.py")


def test_registry_utils_through_the_alias_without_catalogue():
    code = ("import sys, shardstream.compat as c; c.install(); "
            "from streaming.base.registry_utils import TypedRegistry, construct_from_registry; "
            "from streaming.base.stream import streams_registry, Stream; "
            "assert isinstance(streams_registry, TypedRegistry); "
            "assert construct_from_registry('stream', streams_registry, partial_function=False, "
            "kwargs={'local': '/tmp/x'}).local == '/tmp/x'; "
            "print('catalogue' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": shardstream.__path__[0].rsplit("/", 1)[0]})
    assert out.stdout.strip() == "False"

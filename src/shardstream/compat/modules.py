"""The table of mosaicml-streaming's public import paths and where shardstream offers each name.

Each module maps a name to ``"module:attribute"`` of shardstream. A name whose attribute shardstream
does not have (yet) is reported as not offered when imported. Modules absent from the table (the
internals: ``streaming.base.world``, ``shared``, ``partition``, ``shuffle``, ``array`` ...) are
refused with the reason, and so are the names listed in :data:`NOT_OFFERED`.
"""

from __future__ import annotations

_WRITERS = {"MDSWriter": "shardstream:MDSWriter", "JSONWriter": "shardstream:JSONWriter",
            "CSVWriter": "shardstream:CSVWriter", "TSVWriter": "shardstream:TSVWriter",
            "XSVWriter": "shardstream:XSVWriter"}
_TOP = {"StreamingDataset": "shardstream.compat.datasets:StreamingDataset", "StreamingDataLoader": "shardstream:StreamingDataLoader",
        "Stream": "shardstream:Stream", "LocalDataset": "shardstream:LocalDataset", **_WRITERS}
_UTIL = "shardstream.compat.util"
_ENC = "shardstream.compat.encodings"
_TEXT_ENC = "shardstream.compat.textencodings"

MODULES: dict[str, dict[str, str]] = {
    "streaming": {**_TOP, "__version__": "shardstream:__version__"},
    "streaming.base": dict(_TOP),
    "streaming.base.dataset": {"StreamingDataset": "shardstream.compat.datasets:StreamingDataset"},
    "streaming.base.dataloader": {"StreamingDataLoader": "shardstream:StreamingDataLoader"},
    "streaming.base.stream": {"Stream": "shardstream:Stream", "streams_registry": "shardstream:streams_registry"},
    "streaming.base.local": {"LocalDataset": "shardstream:LocalDataset"},
    "streaming.base.util": {name: f"{_UTIL}:{name}" for name in (
        "get_list_arg", "wait_for_file_to_exist", "bytes_to_int", "number_abbrev_to_int",
        "clean_stale_shared_memory", "get_import_exception_message", "merge_index")},
    "streaming.base.format": {**_WRITERS, "get_index_basename": f"{_UTIL}:get_index_basename"},
    "streaming.base.format.index": {"get_index_basename": f"{_UTIL}:get_index_basename"},
    "streaming.base.format.mds": {"MDSWriter": "shardstream:MDSWriter"},
    "streaming.base.format.mds.writer": {"MDSWriter": "shardstream:MDSWriter"},
    "streaming.base.format.mds.encodings": {name: f"{_ENC}:{name}" for name in (
        "Encoding", "_encodings", "get_mds_encodings", "is_mds_encoding", "is_mds_encoding_safe", "mds_encode",
        "mds_decode", "get_mds_encoded_size")},
    "streaming.base.format.json": {"JSONWriter": "shardstream:JSONWriter"},
    "streaming.base.format.json.writer": {"JSONWriter": "shardstream:JSONWriter"},
    "streaming.base.format.xsv": {k: v for k, v in _WRITERS.items() if k[0] in "CTX"},
    "streaming.base.format.xsv.writer": {k: v for k, v in _WRITERS.items() if k[0] in "CTX"},
    "streaming.base.format.json.encodings": {name: f"{_TEXT_ENC}:{name}" for name in (
        "is_json_encoded", "is_json_encoding", "Str", "Int", "Float")},
    "streaming.base.format.xsv.encodings": {name: f"{_TEXT_ENC}:{name}" for name in (
        "is_xsv_encoding", "xsv_encode", "xsv_decode", "Str", "Int", "Float")},
    "streaming.base.registry_utils": {name: f"shardstream.compat.registry_utils:{name}" for name in (
        "TypedRegistry", "create_registry", "construct_from_registry", "import_file", "save_registry")},
    "streaming.base.distributed": {"barrier": "shardstream.integrations.barrier:barrier"},
    "streaming.base.converters": {"dataframe_to_mds": "shardstream.spark:dataframe_to_mds"},
    "streaming.base.converters.dataframe_to_mds": {"dataframe_to_mds": "shardstream.spark:dataframe_to_mds"},
}

#: mosaicml-streaming's public names that are not offered, and why
NOT_OFFERED = {
    "multimodal": "the example datasets (vision, text, multimodal) are not part of shardstream",
    "vision": "the example datasets (vision, text, multimodal) are not part of shardstream",
    "text": "the example datasets (vision, text, multimodal) are not part of shardstream",
    "retry": "use a retrying library (tenacity) or a loop",
}

INTERNAL = ("its internals (World, partitions, shuffles, Array, shared memory, compression and "
            "hashing classes, readers, distributed helpers other than barrier) are not offered: shardstream plans "
            "and reads without them")


def is_package(name: str) -> bool:
    """Whether ``name`` has submodules in the table."""
    return any(other.startswith(name + ".") for other in MODULES)

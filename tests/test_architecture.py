"""The dependency rules of the layered design (see the architecture notes)."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

PKG = pathlib.Path(__file__).resolve().parents[1] / "src" / "shardstream"


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                names.add(node.module)
            elif node.level:
                # resolve relative imports against the module's package
                parts = path.relative_to(PKG.parent).with_suffix("").parts[:-node.level]
                names.add(".".join(parts + ((node.module,) if node.module else ())))
    return names


def _files(sub: str = "") -> list[pathlib.Path]:
    return sorted((PKG / sub).rglob("*.py"))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_imports(path: pathlib.Path) -> list[str]:
    """``module.name`` of every private name (or module) of shardstream that ``path`` imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = path.relative_to(PKG.parent).with_suffix("").parts[:-node.level]
                module = ".".join(parts + ((node.module,) if node.module else ()))
            else:
                module = node.module or ""
            if module.split(".")[0] == "shardstream":
                found += [f"{module}.{a.name}" for a in node.names if any(map(_private, a.name.split(".")))]
                found += [module] if any(map(_private, module.split("."))) else []
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names
                      if a.name.split(".")[0] == "shardstream" and any(map(_private, a.name.split(".")))]
    return found


def test_package_has_modules():
    assert len(_files()) > 15  # the walk below must actually see the package


def test_no_module_imports_another_modules_private_names():
    """A name that starts with ``_`` is its module's own, free to change: ``from .x import _y`` (or
    ``from shardstream.x import _y``) ties another module to it. Make the name public, named for what
    it does, or move it to where both modules use it. (Attribute access such as ``x._y`` is not checked.)"""
    offenders = sorted(f"{p.relative_to(PKG.parent)}: {name}" for p in _files() for name in _private_imports(p))
    assert offenders == []


def test_only_storage_imports_fsspec():
    offenders = [str(p) for p in _files() if "storage" not in p.parts
                 and any(n == "fsspec" or n.startswith("fsspec.") for n in _imports(p))]
    assert offenders == []


def test_format_does_not_import_storage_or_the_engine():
    offenders = [str(p) for p in _files("format")
                 if any(n.startswith(("shardstream.storage", "shardstream.engine")) for n in _imports(p))]
    assert offenders == []


def test_torch_and_jax_only_in_integrations_and_runtime():
    """integrations/ builds on torch and jax; runtime/ only asks them, lazily, what the process is (a DataLoader
    worker, a rank of a distributed job), agrees across ranks and converts finished values."""
    offenders = [str(p) for p in _files() if not {"integrations", "runtime"} & set(p.parts)
                 and any(n.split(".")[0] in ("torch", "jax") for n in _imports(p))]
    assert offenders == []


def test_runtime_imports_torch_and_jax_only_when_asked():
    """Nothing in runtime/ imports torch or jax at module level: `import shardstream` stays light."""
    offenders = []
    for p in _files("runtime"):
        for node in ast.parse(p.read_text()).body:
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{p.name}: {n}" for n in names if n.split(".")[0] in ("torch", "jax")]
    assert _files("runtime") and offenders == []


# The declared layer order, lowest first. A package may import packages of lower tiers only, and of its own tier
# only without a cycle; top-level modules (errors.py, units.py, ...) are packages of their own.
LAYERS = [
    {"errors", "units", "keywords", "yamlsafe", "progress"},
    {"plan"},  # pure: numpy only
    {"format"},  # what a shard or data file holds, and the registry of formats
    {"stats"},
    {"storage"},  # stores, the cache, fetching: the only importer of fsspec
    {"ring", "writing"},
    {"runtime"},  # the process's runtime, asked lazily: DataLoader worker, ranks, agreement, tensor conversion
    {"engine"},  # the one engine: table, cursor, order, source, stages, run, state
    {"text"},  # text stages and tokenizers
    {"dataset"},  # StreamingDataset and the chain of operations over it
    {"hub", "sources", "loaders"},  # Hugging Face layouts, EasyDeL-style sources, the thread loaders
    {"pipeline"},
    {"convert"},
    {"integrations"},  # torch and jax loaders, Spark, Ray
    {"compat", "cli", "testing", "check", "spark", "__init__", "__main__"},
]


def _package_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "shardstream" or len(parts) < 2:
        return None
    return parts[1]


def _package_imports() -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> the modules that import it."""
    out: dict = {}
    for p in _files():
        rel = p.relative_to(PKG).with_suffix("").parts
        here = rel[0]
        for n in _imports(p):
            there = _package_of(n)
            if there is None or there == here:
                continue
            if not ((PKG / there).is_dir() or (PKG / f"{there}.py").exists()):
                continue
            out.setdefault(here, {}).setdefault(there, []).append(".".join(rel))
    return out


def test_every_package_has_a_declared_layer():
    tiers = set().union(*LAYERS)
    packages = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    packages |= {p.stem for p in PKG.glob("*.py")}
    assert packages - tiers == set(), "add the new package to LAYERS, in the tier it belongs to"


def test_packages_import_only_lower_layers():
    tier = {name: i for i, names in enumerate(LAYERS) for name in names}
    upward = sorted(f"{here} -> {there} (in {', '.join(sorted(set(mods)))})"
                    for here, deps in _package_imports().items() for there, mods in deps.items()
                    if tier[there] > tier[here])
    assert upward == []


def test_no_package_cycles():
    graph = {here: set(deps) for here, deps in _package_imports().items()}
    cycles = []

    def visit(node, path):
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif len(path) < len(graph) + 1:
                visit(nxt, path + [nxt])

    for start in sorted(graph):
        visit(start, [start])
    assert cycles == []


# Private attributes of objects that are not ours, used where no public way exists (each with its reason).
FOREIGN_PRIVATE = {
    "os._exit",  # leave a forked child without running the parent's exit handlers
    "sys._getframe",  # the caller's frame, for warnings that point at the user's line
    "fs._strip_protocol",  # fsspec: a path without its protocol, as the filesystem itself keys it
    "fs._get_file",  # fsspec: the async download of one file, for a download with our own timeout
    "fs._s3",  # s3fs: the botocore client, to switch off its inner retries (ours are counted)
    "it._shutdown_workers",  # torch: stop a DataLoader's workers at once when the loader is dropped
    "torch_it._shutdown_workers",
    "super()._encode_image",
    "super()._rows",
    "super()._abort",
}


def test_no_object_reaches_into_another_objects_private_attributes():
    """``self._x`` is the object's own; ``other._x`` ties the code to another object's insides (the leak the
    cursor closed for the dataset). Give that object a public method or property and use it."""
    offenders = []
    for p in _files():
        for node in ast.walk(ast.parse(p.read_text())):
            if not isinstance(node, ast.Attribute) or not _private(node.attr):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            expr = f"{ast.unparse(node.value)}.{node.attr}"
            if expr not in FOREIGN_PRIVATE:
                offenders.append(f"{p.relative_to(PKG.parent)}:{node.lineno}: {expr}")
    assert offenders == []


SHARED_MEMORY = ("shared_memory", "SharedMemory", "/dev/shm", "memfd", "MAP_SHARED", "shm_open")


def test_shared_memory_only_in_the_batch_data_plane():
    """Shared memory carries finished batches only: it is made in shardstream/ring/ and nowhere else
    (never for order, positions or cache state)."""
    def text(p):  # clean_stale_shared_memory(): mosaicml-streaming's name, offered as a no-op
        return p.read_text().replace("clean_stale_shared_memory", "")

    offenders = [str(p) for p in _files() if p.parent.name != "ring" and any(w in text(p) for w in SHARED_MEMORY)]
    assert offenders == []


def test_the_data_plane_leaves_nothing_that_outlives_its_processes():
    """The ring is a memfd (no name) or an anonymous mapping: no named segment that a kill -9 could leave behind."""
    code = "\n".join(p.read_text() for p in _files("ring"))
    assert "memfd_create" in code
    for named in ("SharedMemory(", "shm_open", "/dev/shm/", "mkstemp", "NamedTemporaryFile"):
        assert named not in code
    allowed = {"__future__", "itertools", "mmap", "os", "threading", "weakref", "typing", "numpy",
               "multiprocessing.reduction", "shardstream.errors", "shardstream.format.batch"}
    for p in _files("ring"):
        assert {n for n in _imports(p) if not n.startswith("shardstream.ring")} <= allowed, p


def test_import_is_light():
    """`import shardstream` pulls in neither torch, fsspec backends, Pillow nor the optional codecs."""
    code = ("import sys, shardstream; "
            "print(','.join(m for m in ('torch', 'jax', 'PIL', 'brotli', 'snappy', 's3fs', 'gcsfs') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def test_plan_imports_numpy_only():
    """plan/ is pure: numpy and the standard library's typing helpers, nothing that does I/O."""
    allowed = {"__future__", "numpy", "math", "dataclasses", "typing", "collections.abc", "shardstream.errors"}
    offenders = {}
    for p in _files("plan"):
        bad = {n for n in _imports(p) if n not in allowed and not n.startswith("shardstream.plan")}
        if bad:
            offenders[str(p)] = sorted(bad)
    assert _files("plan") and offenders == {}

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


def test_format_does_not_import_storage_or_loader():
    offenders = [str(p) for p in _files("format")
                 if any(n.startswith(("shardstream.storage", "shardstream.loader")) for n in _imports(p))]
    assert offenders == []


def test_torch_and_jax_only_in_integrations():
    offenders = [str(p) for p in _files() if "integrations" not in p.parts
                 and any(n.split(".")[0] in ("torch", "jax") for n in _imports(p))]
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


#: The thread loaders and what they run a chain through: none of them reaches into another object's privates.
THREAD_LOADERS = ("loader/threadloader.py", "loader/batches.py", "integrations/jax.py", "process/asyncloader.py",
                  "process/chainpass.py")


def _foreign_private_attributes(path: pathlib.Path) -> list[str]:
    """``x._y`` where ``x`` is not ``self`` or ``cls`` (dunder names such as ``__name__`` are public)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and _private(node.attr) and not node.attr.startswith("__"):
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                out.append(f"line {node.lineno}: {ast.unparse(node)}")
    return out


def test_thread_loaders_use_only_public_attributes_of_other_objects():
    """A loader that reads or writes a chain's ``_next_epoch`` or ``_loaded`` breaks when the chain changes; it
    asks through public methods (``take_pass``, ``prefetch_depth``, ``state_dict``)."""
    offenders = {f: _foreign_private_attributes(PKG / f) for f in THREAD_LOADERS}
    assert {f: found for f, found in offenders.items() if found} == {}

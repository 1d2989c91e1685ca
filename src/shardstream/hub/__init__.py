"""Hugging Face datasets through the engine: ``save_to_disk`` directories, Hub-style repositories
(local, on an object store, or on the Hub through ``hf://``), and :func:`load_dataset`."""

from .layout import Layout
from .load import load_dataset
from .resolve import Located, dataset_root, hub_url, locate

__all__ = ["Layout", "Located", "dataset_root", "hub_url", "load_dataset", "locate"]

"""Tests of the framework integrations: PyTorch DataLoaders, the threaded BatchLoader, JAX."""

"""Bridges to training frameworks; the only package that touches torch or jax."""

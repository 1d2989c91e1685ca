"""Reusable checks for code built on shardstream (usable from any test suite)."""

from .datasets import write_dataset
from .resume import ResumeReport, check_resumes_identically, read_world, sample_key

__all__ = ["ResumeReport", "check_resumes_identically", "read_world", "sample_key", "write_dataset"]

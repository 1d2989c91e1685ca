"""Reusable checks for code built on shardstream (usable from any test suite)."""

from .resume import ResumeReport, check_resumes_identically, read_world, sample_key

__all__ = ["ResumeReport", "check_resumes_identically", "read_world", "sample_key"]

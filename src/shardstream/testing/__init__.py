"""Reusable checks for code built on shardstream (usable from any test suite)."""

from .chains import ChainResumeReport, check_chain_resumes
from .datasets import write_dataset, write_text_rows
from .resume import ResumeReport, check_resumes_identically, read_world, sample_key

__all__ = ["ResumeReport", "check_resumes_identically", "read_world", "sample_key", "write_dataset",
           "ChainResumeReport", "check_chain_resumes", "write_text_rows"]

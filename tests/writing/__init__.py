"""Tests of writing datasets: MDSWriter to remote outputs, writers killed mid-write, merge_index."""

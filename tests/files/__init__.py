"""Tests of data files read as shards: JSON Lines, JSON, CSV and text files, in place and through the cache."""

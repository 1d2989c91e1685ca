"""Tests of StreamingDataset over local datasets: indexing, order, mixed streams, resumption, worlds."""

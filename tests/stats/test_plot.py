"""``plot_timeline``: a loader's real timeline drawn into a PNG; bad timelines and paths refused."""

from __future__ import annotations

import numpy as np
import pytest

from shardstream import BatchLoader, InvalidArgumentError, MDSWriter, StreamingDataset
from shardstream.stats.plot import plot_timeline, time_bins
from shardstream.stats.report import CRITICAL
from shardstream.stats.verdict import verdict

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def loader(tmp_path):
    with MDSWriter(out=str(tmp_path / "ds"), columns={"id": "int"}, size_limit=256) as w:
        for i in range(64):
            w.write({"id": i})
    loader = BatchLoader(StreamingDataset(local=str(tmp_path / "ds"), batch_size=4), stats=True)
    assert sum(len(b["id"]) for b in loader) == 64
    return loader


def test_a_real_timeline_becomes_a_png(loader, tmp_path):
    report = loader.stats()
    path = plot_timeline(loader.stats_timeline(), report, str(tmp_path / "t.png"), title=verdict(report).text)
    data = open(path, "rb").read()
    assert path == str(tmp_path / "t.png") and data[:8] == PNG and len(data) > 10_000


def test_time_bins_cover_every_batch():
    t = np.array([0.0, 0.1, 0.5, 1.0, 1.0])
    edges, which = time_bins(t, bins=4)
    assert edges[0] == 0.0 and edges[-1] == 1.0 and len(edges) == 5
    assert which.tolist() == [0, 0, 2, 3, 3]
    assert len(time_bins(np.array([0.0]))[0]) == 2  # one batch: one bin


def test_bad_timelines_and_paths_are_refused(loader, tmp_path):
    timeline = loader.stats_timeline()
    with pytest.raises(InvalidArgumentError, match="no decode"):
        plot_timeline({k: v for k, v in timeline.items() if k != "decode"}, None, str(tmp_path / "a.png"))
    empty = {k: np.zeros(0) for k in ("t", "wait", "between", "rows", *CRITICAL)}
    with pytest.raises(InvalidArgumentError, match="holds no batches"):
        plot_timeline(empty, None, str(tmp_path / "b.png"))
    with pytest.raises(InvalidArgumentError, match="different lengths"):
        plot_timeline({**timeline, "wait": timeline["wait"][:-1]}, None, str(tmp_path / "c.png"))
    with pytest.raises(InvalidArgumentError, match="is not a directory"):
        plot_timeline(timeline, None, str(tmp_path / "missing" / "d.png"))

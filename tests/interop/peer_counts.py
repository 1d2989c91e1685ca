"""Run inside the peer virtualenv: how mosaicml-streaming sizes epochs, for the count tests.

``python peer_counts.py CASES.json OUT.json``. Each case is either a partition (``"kind":
"partition"``: the batches of real samples each node, rank and worker gets from the
package's partition function, resumed after ``drop_first``) or a dataset (``"kind":
"dataset"``: ``len()`` of a real ``StreamingDataset`` over ``local`` as rank 0 of
``world_size`` ranks, and how many samples one rank iterates in one epoch).
"""

import json
import os
import sys
import warnings

warnings.simplefilter("ignore")


def partition(case):
    from streaming.base.partition import get_partitions

    ids = get_partitions("orig", case["num_samples"], case["canonical"], case["nodes"], case["ranks"],
                         case["workers"], case["batch"], case["drop_first"])
    out = {}
    for n in range(ids.shape[0]):
        for r in range(ids.shape[1]):
            for w in range(ids.shape[2]):
                real = [int((b != -1).sum()) for b in ids[n, r, w]]
                out[f"{n},{r},{w}"] = [c for c in real if c]
    return out


def dataset(case):
    os.environ.update(RANK="0", WORLD_SIZE=str(case["world_size"]), LOCAL_RANK="0",
                      LOCAL_WORLD_SIZE=str(case["world_size"]))
    from streaming import StreamingDataset

    ds = StreamingDataset(local=case["local"], batch_size=case["batch"], num_canonical_nodes=case["canonical"])
    result = {"len": len(ds)}
    if case["world_size"] == 1:
        result["iterated"] = sum(1 for _ in ds)
    return result


def main():
    cases = json.load(open(sys.argv[1]))
    results = []
    for case in cases:
        try:
            results.append(partition(case) if case["kind"] == "partition" else dataset(case))
        except ValueError as e:  # the package cannot partition a few tiny datasets at all
            results.append({"error": str(e)})
    json.dump(results, open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()

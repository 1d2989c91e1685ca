"""Drive mosaicml-streaming's JSON / CSV / TSV / XSV writers and its reader for the interop tests of
those shard formats. Runs under the PEER interpreter (``PYTHONPATH=tests/peer_stubs``)::

    python tests/interop/peer_xsv.py JOBS.json RESULT.json

Each job is ``{"cmd": "write", "writer": "CSVWriter", "out": DIR, "kwargs": {...}, "rows": [...]}`` or
``{"cmd": "read", "dir": DIR}`` (every sample of ``streaming.StreamingDataset(local=DIR)``, in order,
by iteration and by index). The result is one ``{"ok": bool, "result" | "error": ...}`` per job.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import traceback

for _var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
    os.environ.pop(_var, None)


def run(job: dict):
    import streaming
    from streaming.base.format import CSVWriter, JSONWriter, TSVWriter, XSVWriter

    if job["cmd"] == "write":
        cls = {"JSONWriter": JSONWriter, "CSVWriter": CSVWriter, "TSVWriter": TSVWriter,
               "XSVWriter": XSVWriter}[job["writer"]]
        with cls(out=job["out"], **job["kwargs"]) as writer:
            for row in job["rows"]:
                writer.write(row)
        return None
    ds = streaming.StreamingDataset(local=job["dir"], remote=None, shuffle=False, batch_size=1)
    by_iter = [dict(s) for s in ds]
    by_index = [dict(ds[i]) for i in range(len(ds))]
    del ds
    gc.collect()  # each dataset holds open files and shared memory until collected
    return {"iter": by_iter, "items": by_index}


def main() -> None:
    jobs_path, result_path = sys.argv[1:3]
    with open(jobs_path) as f:
        jobs = json.load(f)
    results = []
    for job in jobs:
        try:
            results.append({"ok": True, "result": run(job)})
        except Exception:
            results.append({"ok": False, "error": traceback.format_exc()})
    with open(result_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# The handoff benchmark's GPU curve (bench/bench_handoff.py --gpu) on a fresh GPU machine that has
# Python 3.12 at python3 with torch (CUDA), torchvision, numpy, fsspec, xxhash, pyarrow, tqdm, pillow and
# psutil, and no internet. What it lacks (zstandard for shardstream; mosaicml-streaming and what
# `import streaming` needs: transformers and its imports, catalogue, zstd, python-snappy, brotli) travels
# as wheels in .whl/ at the repository root, installed here without an index into $SITE.
#
# Usage, from anywhere: bash bench/device_handoff.sh [more bench_handoff.py options]
#   OUT      where the report (handoff.md), the raw results (handoff.json) and the log go (default /tmp/handoff)
#   PYTHON   the interpreter (default python3); the peers run with the same one
#   WHEELS   the wheel folder (default .whl); SITE the install target (default /tmp/site)
#   BUDGET_S the run's wall-time budget in seconds (default 320), writing the data included
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PY=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
SITE=${SITE:-/tmp/site}
OUT=${OUT:-/tmp/handoff}
mkdir -p "$OUT"

start=$(date +%s)
if "$PY" -m pip --version >/dev/null 2>&1; then
    "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --no-cache-dir \
        --target "$SITE" "$WHEELS"/*.whl
else  # no pip: a wheel is a zip file laid out as it is installed
    for wheel in "$WHEELS"/*.whl; do "$PY" -m zipfile -e "$wheel" "$SITE"; done
fi
export PYTHONPATH="$SITE:$PWD/src:$PWD/bench${PYTHONPATH:+:$PYTHONPATH}"
echo "device_handoff: wheels installed in $(( $(date +%s) - start )) s"

nvidia-smi -L || echo "device_handoff: no nvidia-smi"
echo "CPUs: $(nproc)"
df -h /dev/shm | tail -n 1
"$PY" - <<'PYEOF'
import platform
import numpy, torch, streaming, zstandard
print(f"python {platform.python_version()}, torch {torch.__version__} (CUDA {torch.version.cuda}, "
      f"available: {torch.cuda.is_available()}), numpy {numpy.__version__}, "
      f"mosaicml-streaming {streaming.__version__}, zstandard {zstandard.__version__}")
PYEOF

set +e  # a failed case still leaves its report; the exit status says so
"$PY" -u bench/bench_handoff.py --gpu --peer-python "$(command -v "$PY")" --peer-path '' \
    --budget-s "${BUDGET_S:-320}" --out "$OUT/handoff.md" --json "$OUT/handoff.json" "$@" 2>&1 \
    | tee "$OUT/handoff.log"
status=${PIPESTATUS[0]}
set -e
echo "device_handoff: done in $(( $(date +%s) - start )) s (exit $status)"
exit "$status"

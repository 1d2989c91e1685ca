#!/usr/bin/env bash
# Create a virtualenv holding the peer libraries used by the interop tests and
# benchmarks (mosaicml-streaming, litdata) on top of CPU torch.
#
# Usage: bench/install_peers.sh VENV_DIR
#
# pip itself is first upgraded to $PIP_REQ: the pip bundled with Python 3.11
# (23.2) backtracks through dozens of aiobotocore/s3fs releases and then fails.
# Package lines come from bench/requirements-peers.txt, installed in this order:
#   1. torch (pinned; pip takes the CPU wheel from local disk),
#   2. every other line except the two below, in ONE pip command (boto3 and
#      s3fs must be resolved together, or pip picks a botocore that aiobotocore
#      cannot use, or backtracks to an ancient s3fs),
#   3. mosaicml-streaming with --no-deps (its metadata pulls torchvision, the
#      Azure/GCS/OCI SDKs, paramiko, matplotlib; none is imported for local use),
#   4. litdata with --no-deps (its metadata pulls torchvision, which would be
#      the CUDA build and fails to import against CPU torch; obstore and
#      tifffile are only imported for remote stores / TIFF samples).
# A constraints file in the venv pins torch for every step, so no other torch
# is ever downloaded.
#
# `import streaming` needs torchvision.datasets / torchvision.transforms; put
# tests/peer_stubs on PYTHONPATH for the stand-in package.
#
# Idempotent: a marker file in the venv records the requirements it was built
# from; a second run with the same requirements does nothing.
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 VENV_DIR" >&2
    exit 2
fi

VENV_DIR=$1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$HERE/.." && pwd)
REQS="$HERE/requirements-peers.txt"
STUBS="$REPO_ROOT/tests/peer_stubs"
PYTHON_BIN=${PYTHON:-python3}
PIP_REQ="pip==26.3"
MARKER="$VENV_DIR/.peers-installed"

req_hash=$(sha256sum "$REQS" | cut -d' ' -f1)
if [[ -f "$MARKER" ]] && [[ "$(cat "$MARKER")" == "$req_hash" ]] && [[ -x "$VENV_DIR/bin/python" ]]; then
    echo "install_peers: $VENV_DIR is up to date (marker $MARKER)"
    exit 0
fi

# Pick one line of the requirements file by package name (exact, case-insensitive).
req_line() {
    local line
    line=$(grep -iE "^$1([=<>!~ ;\[]|$)" "$REQS" | head -n1 || true)
    if [[ -z "$line" ]]; then
        echo "install_peers: $1 missing from $REQS" >&2
        exit 1
    fi
    printf '%s\n' "$line"
}

TORCH_REQ=$(req_line torch)
MDS_REQ=$(req_line mosaicml-streaming)
LITDATA_REQ=$(req_line litdata)
mapfile -t DEP_REQS < <(grep -vE '^[[:space:]]*(#|$)' "$REQS" \
    | grep -viE '^(torch|mosaicml-streaming|litdata)([=<>!~ ;\[]|$)')

start=$(date +%s)
rm -f "$MARKER"
"$PYTHON_BIN" -m venv "$VENV_DIR"
PY="$VENV_DIR/bin/python"

CONSTRAINTS="$VENV_DIR/peer-constraints.txt"
printf '%s\n' "$TORCH_REQ" > "$CONSTRAINTS"

pip_install() {
    "$PY" -m pip install --disable-pip-version-check -c "$CONSTRAINTS" "$@"
}

echo "install_peers: [0/4] $PIP_REQ"
"$PY" -m pip install --disable-pip-version-check --upgrade "$PIP_REQ"

echo "install_peers: [1/4] $TORCH_REQ"
pip_install "$TORCH_REQ"

echo "install_peers: [2/4] ${#DEP_REQS[@]} dependency lines"
pip_install "${DEP_REQS[@]}"

echo "install_peers: [3/4] $MDS_REQ (--no-deps)"
pip_install --no-deps "$MDS_REQ"

echo "install_peers: [4/4] $LITDATA_REQ (--no-deps)"
pip_install --no-deps "$LITDATA_REQ"

# Smoke check: both peers import, torch is still the pinned CPU build.
PYTHONPATH="$STUBS${PYTHONPATH:+:$PYTHONPATH}" "$PY" - "$TORCH_REQ" <<'PYEOF'
import sys
import torch
import streaming
import litdata
from streaming.base.util import merge_index, clean_stale_shared_memory  # noqa: F401
want = sys.argv[1].split("==", 1)[1]
assert torch.__version__.split("+")[0] == want, (torch.__version__, want)
print(f"install_peers: torch {torch.__version__}, mosaicml-streaming "
      f"{streaming.__version__}, litdata {litdata.__version__}")
PYEOF

printf '%s\n' "$req_hash" > "$MARKER"
echo "install_peers: done in $(( $(date +%s) - start ))s -> $VENV_DIR"

#!/bin/sh
# Run uv, installing it first when this machine has none (needs only Python 3.11+).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
if command -v uv >/dev/null 2>&1; then
    exec uv "$@"
fi
boot="$here/.tools/uv"
if [ ! -x "$boot/bin/uv" ]; then
    echo "tools/uv.sh: uv not found; installing it into $boot" >&2
    python3 -m venv "$boot" >&2
    "$boot/bin/python" -m pip install --quiet --disable-pip-version-check uv >&2
fi
exec "$boot/bin/uv" "$@"

#!/bin/sh
# Run uv, installing it first when this machine has none (needs only Python 3.11+).
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
if command -v uv >/dev/null 2>&1; then
    exec uv "$@"
fi
boot="$here/.tools/uv"
if [ -x "$boot/bin/uv" ]; then
    exec "$boot/bin/uv" "$@"
fi
echo "tools/uv.sh: uv not found; installing it into $boot" >&2
# 1. a private venv (needs ensurepip: Debian/Ubuntu ship it as python3-venv)
if python3 -m venv "$boot" >/dev/null 2>&1 && "$boot/bin/python" -m pip --version >/dev/null 2>&1; then
    "$boot/bin/python" -m pip install --quiet --disable-pip-version-check uv >&2
    exec "$boot/bin/uv" "$@"
fi
rm -rf "$boot"
# 2. pip into a private target folder (no venv module needed)
if python3 -m pip --version >/dev/null 2>&1; then
    python3 -m pip install --quiet --disable-pip-version-check --target "$boot/lib" uv >&2
    mkdir -p "$boot/bin" && ln -sf "$boot/lib/bin/uv" "$boot/bin/uv"
    exec "$boot/bin/uv" "$@"
fi
# 3. the official standalone installer
if command -v curl >/dev/null 2>&1; then
    curl -LsSf https://astral.sh/uv/install.sh | env UV_INSTALL_DIR="$boot/bin" UV_NO_MODIFY_PATH=1 sh >&2
    exec "$boot/bin/uv" "$@"
fi
echo "tools/uv.sh: cannot install uv: no python3 venv/pip and no curl; see https://docs.astral.sh/uv/" >&2
exit 1

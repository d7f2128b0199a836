#!/usr/bin/env bash
# Create .venv with Python >= 3.12 and install the project with its test tools.
set -euo pipefail
cd "$(dirname "$0")/.."

find_python() {
    for candidate in "${PYTHON:-}" "$(pyenv root 2>/dev/null)/versions/$(cat .python-version 2>/dev/null)/bin/python" python3.13 python3.12 python3; do
        [ -n "$candidate" ] || continue
        if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

if [ ! -x .venv/bin/python ]; then
    if ! PY=$(find_python); then
        echo "error: millrace_django needs Python >= 3.12 (Django 6.1); none found." >&2
        echo "       Install one (e.g. 'pyenv install 3.13') or set PYTHON=/path/to/python3.12+." >&2
        exit 1
    fi
    echo "bootstrap: creating .venv with $("$PY" --version)"
    "$PY" -m venv .venv
fi
.venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 12))' || {
    echo "error: .venv runs Python < 3.12; delete .venv and run again." >&2
    exit 1
}
stamp=.venv/.installed-$( (cat pyproject.toml; echo "${MILLRACE_EXTRAS:-all}") | sha1sum | cut -c1-12)
if [ ! -f "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e ".[${MILLRACE_EXTRAS:-dev,postgres,mysql,mssql}]"
    rm -f .venv/.installed-*
    touch "$stamp"
fi

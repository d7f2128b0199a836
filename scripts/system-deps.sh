#!/usr/bin/env bash
# Debian packages the test servers and the MariaDB driver need; installed only when missing.
set -euo pipefail
missing=()
command -v mariadbd >/dev/null 2>&1 || command -v mysqld >/dev/null 2>&1 || missing+=(mariadb-server)
dpkg -s libmariadb-dev >/dev/null 2>&1 || missing+=(libmariadb-dev)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
[ -x /usr/lib/postgresql/15/bin/initdb ] || missing+=(postgresql-15)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "error: missing Debian packages: ${missing[*]} (run as root or install them)" >&2
        exit 1
    fi
    echo "system-deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 || {
        apt-get update -q >/dev/null
        apt-get install -y -q "${missing[@]}" >/dev/null
    }
fi

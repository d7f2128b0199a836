#!/usr/bin/env bash
# The sample project: migrate, make an admin user, start a worker (with its scheduler)
# and the development server, enqueue one sample job of every shape, and say where to
# look. Stop with Ctrl-C.
#
#   make demo                                      on SQLite (db.sqlite3)
#   MILLRACE_DATABASE_URL=postgres://u:p@host/db make demo   durably on PostgreSQL
#   DEMO_UNTIL_IDLE=1 make demo                    non-interactive check: enqueue, run
#                                                  the worker until every sample has
#                                                  ended, print their states, exit 0
#                                                  only if each ended as expected
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
export DJANGO_SETTINGS_MODULE=testproject.settings
mkdir -p .tmp

if [ -n "${MILLRACE_DATABASE_URL:-}" ]; then
    where="PostgreSQL/MariaDB (MILLRACE_DATABASE_URL)"
else
    where="SQLite"
fi

if [ "${DEMO_UNTIL_IDLE:-0}" = "1" ]; then
    # A database of its own (on SQLite), emptied of earlier jobs either way.
    if [ -z "${MILLRACE_DATABASE_URL:-}" ]; then
        export MILLRACE_SQLITE_PATH=${MILLRACE_SQLITE_PATH:-$PWD/.tmp/demo-check.sqlite3}
        rm -f "$MILLRACE_SQLITE_PATH" "$MILLRACE_SQLITE_PATH-wal" "$MILLRACE_SQLITE_PATH-shm"
    fi
    $PY manage.py migrate --noinput -v 0
    $PY manage.py millrace_demo_enqueue --reset
    deadline=$((SECONDS + ${DEMO_TIMEOUT:-90}))
    while :; do
        $PY manage.py millrace_worker --until-idle -v 0
        rc=0
        $PY manage.py millrace_demo_status --check --quiet || rc=$?
        [ "$rc" -eq 3 ] || exit "$rc"   # 0: all as expected, 1: something ended wrong
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "demo: samples still pending after ${DEMO_TIMEOUT:-90}s" >&2
            $PY manage.py millrace_demo_status --check || true
            exit 1
        fi
        sleep 1   # a retry or a delayed job is due shortly
    done
fi

$PY manage.py migrate --noinput -v 0
$PY manage.py shell -v 0 -c "
from django.contrib.auth import get_user_model
User = get_user_model()
if not User.objects.filter(username='admin').exists():
    User.objects.create_superuser('admin', 'admin@example.com', 'admin')
"

pids=()
cleanup() {
    trap - EXIT INT TERM
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# In sessions of their own, so Ctrl-C reaches them once, through cleanup: the worker
# then drains (a second signal would release its jobs at once).
setsid $PY manage.py millrace_worker >.tmp/demo-worker.log 2>&1 &
pids+=($!)
setsid $PY manage.py runserver 127.0.0.1:8000 --noreload >.tmp/demo-server.log 2>&1 &
pids+=($!)
$PY manage.py millrace_demo_enqueue

cat <<MSG

  Millrace demo on $where: a worker with its scheduler, and the development server.

  - the jobs, in the admin:  http://127.0.0.1:8000/admin/millrace_django/job/
                             (user admin, password admin)
  - the worker's log:        .tmp/demo-worker.log   (the server's: .tmp/demo-server.log)
  - the samples' states:     .venv/bin/python manage.py millrace_demo_status
  - approve the waiting order (the order-approval workflow, testproject/workflows.py):
      .venv/bin/python manage.py shell -c "from testproject.workflows import approve; print(approve('demo-waiting'))"
  - stop with Ctrl-C

MSG
status=0
wait -n "${pids[@]}" || status=$?
echo "demo: a process exited (status $status); see .tmp/demo-worker.log and .tmp/demo-server.log" >&2
exit 1

#!/usr/bin/env bash
# The sample project on SQLite: migrate, make an admin user, start the worker (with its
# scheduler) and the development server, enqueue the sample jobs, and say where to look.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
export DJANGO_SETTINGS_MODULE=testproject.settings

$PY manage.py migrate --noinput >/dev/null
$PY manage.py shell -c "
from django.contrib.auth import get_user_model
User = get_user_model()
if not User.objects.filter(username='admin').exists():
    User.objects.create_superuser('admin', 'admin@example.com', 'admin')
"
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

if $PY manage.py help millrace_worker >/dev/null 2>&1; then
    $PY manage.py millrace_worker &
    pids+=($!)
    $PY manage.py millrace_demo_enqueue
fi
cat <<'MSG'

  Millrace demo on SQLite
  - the admin:      http://127.0.0.1:8000/admin/   (user admin, password admin)
  - stop with Ctrl-C

MSG
$PY manage.py runserver 127.0.0.1:8000 --noreload &
pids+=($!)
wait -n "${pids[@]}"

"""Settings of projects shaped unlike the sample one, for tests that start ``manage.py``
with them (each on the SQLite file named by ``MILLRACE_SQLITE_PATH``)."""

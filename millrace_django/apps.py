from django.apps import AppConfig


class MillraceConfig(AppConfig):
    """Millrace's Django app: models, admin, checks and management commands."""

    name = "millrace_django"
    verbose_name = "Millrace"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from millrace_django import assembly, checks  # noqa: F401 - registers the system checks
        from millrace_django.dashboard import checks as dashboard_checks  # noqa: F401

        assembly.install()

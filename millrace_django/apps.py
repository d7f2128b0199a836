from django.apps import AppConfig


class MillraceConfig(AppConfig):
    """Millrace's Django app: models, admin, checks and management commands."""

    name = "millrace_django"
    verbose_name = "Millrace"
    default_auto_field = "django.db.models.BigAutoField"

from django.apps import AppConfig


class SampleConfig(AppConfig):
    """Sample jobs for the demo (``make demo``)."""

    name = "testproject.sample"
    label = "sample"
    verbose_name = "Millrace samples"

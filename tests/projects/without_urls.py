"""Settings for worker machines only: the sample project's without ``ROOT_URLCONF``."""

from testproject.settings import *  # noqa: F403

del ROOT_URLCONF  # noqa: F821 - bound by the star import

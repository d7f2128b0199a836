"""Millrace for Django: durable background jobs and workflows as a Django app."""

__version__ = "0.1.0"

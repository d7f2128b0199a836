"""Template filters of Millrace's pages (``{% load millrace_dashboard %}``)."""

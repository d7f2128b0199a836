"""Charts drawn on the server as inline SVG: no JavaScript, no build step.

Colours come from the admin's CSS variables where one fits, so the charts follow the
admin's light and dark themes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from millrace_django.dashboard.services import ThroughputPoint

SUCCEEDED_COLOUR = "#3a9a5b"
FAILED_COLOUR = "#c94a4a"


def _n(value: float) -> str:
    return f"{value:.1f}"


def state_bars(counts: Mapping[str, int], colours: Mapping[str, str]) -> SafeString:
    """A horizontal bar per state, scaled to the largest (a zero draws no bar)."""
    width, row, label_width = 360, 22, 100
    largest = max(counts.values(), default=0) or 1
    rows = []
    for index, (state, count) in enumerate(counts.items()):
        y = index * row
        length = round((width - label_width - 60) * count / largest)
        rows.append(
            format_html(
                '<g><title>{}: {}</title><text x="0" y="{}" class="mr-chart-label">{}</text>'
                '<rect x="{}" y="{}" width="{}" height="14" rx="2" fill="{}"></rect>'
                '<text x="{}" y="{}" class="mr-chart-value">{}</text></g>',
                state,
                count,
                y + 12,
                state,
                label_width,
                y + 1,
                length,
                colours.get(state, "#888"),
                label_width + length + 6,
                y + 12,
                count,
            )
        )
    return format_html(
        '<svg class="mr-chart" role="img" aria-label="Jobs per state" width="{}" height="{}" '
        'viewBox="0 0 {} {}">{}</svg>',
        width,
        len(rows) * row,
        width,
        len(rows) * row,
        format_html_join("", "{}", ((r,) for r in rows)),
    )


def throughput_chart(points: Sequence[ThroughputPoint]) -> SafeString:
    """Stacked columns per time bucket: succeeded below, failed on top."""
    width, height, pad = 720, 180, 28
    if not points:
        return format_html('<p class="mr-muted">{}</p>', "No finished jobs in this period.")
    largest = max((p.succeeded + p.failed for p in points), default=0) or 1
    slot = (width - pad) / len(points)
    bar = max(1.0, slot * 0.8)
    columns = []
    for index, point in enumerate(points):
        x = pad + index * slot
        ok_height = (height - pad) * point.succeeded / largest
        failed_height = (height - pad) * point.failed / largest
        columns.append(
            format_html(
                "<g><title>{}: {} succeeded, {} failed</title>"
                '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"></rect>'
                '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"></rect></g>',
                point.start.strftime("%H:%M"),
                point.succeeded,
                point.failed,
                _n(x),
                _n(height - pad - ok_height),
                _n(bar),
                _n(ok_height),
                SUCCEEDED_COLOUR,
                _n(x),
                _n(height - pad - ok_height - failed_height),
                _n(bar),
                _n(failed_height),
                FAILED_COLOUR,
            )
        )
    first, last = points[0].start.strftime("%H:%M"), points[-1].start.strftime("%H:%M")
    return format_html(
        '<svg class="mr-chart" role="img" aria-label="Throughput and failures" width="{}" '
        'height="{}" viewBox="0 0 {} {}">'
        '<text x="0" y="12" class="mr-chart-value">{}</text>'
        '<line x1="{}" y1="{}" x2="{}" y2="{}" class="mr-axis"></line>{}'
        '<text x="{}" y="{}" class="mr-chart-label">{}</text>'
        '<text x="{}" y="{}" class="mr-chart-label" text-anchor="end">{}</text></svg>',
        width,
        height,
        width,
        height,
        largest,
        pad,
        height - pad,
        width,
        height - pad,
        format_html_join("", "{}", ((c,) for c in columns)),
        pad,
        height - 8,
        first,
        width,
        height - 8,
        last,
    )

"""A strict reader of the Prometheus text format (0.0.4), for the endpoint's tests."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{(.*)\}})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


@dataclass
class Metric:
    help: str
    kind: str
    samples: dict[tuple[tuple[str, str], ...], float] = field(default_factory=dict)


def parse(text: str) -> dict[str, Metric]:
    """Every family by name; raises on a line out of place or malformed."""
    assert text.endswith("\n"), "the exposition ends with a newline"
    metrics: dict[str, Metric] = {}
    pending_help: tuple[str, str] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            assert name not in metrics, f"line {number}: {name} described twice"
            pending_help = (name, help_text)
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            assert pending_help is not None and pending_help[0] == name, f"line {number}"
            assert kind in ("gauge", "counter", "histogram", "summary", "untyped")
            metrics[name] = Metric(pending_help[1], kind)
            pending_help = None
        else:
            match = _SAMPLE.match(line)
            assert match is not None, f"line {number} is not a sample: {line!r}"
            name, raw_labels, value = match.groups()
            assert name in metrics, f"line {number}: {name} has no HELP/TYPE before it"
            labels = _labels(raw_labels or "", number)
            assert labels not in metrics[name].samples, f"line {number}: duplicate sample"
            metrics[name].samples[labels] = float(value)
    return metrics


def _labels(raw: str, number: int) -> tuple[tuple[str, str], ...]:
    found: list[tuple[str, str]] = []
    position = 0
    while position < len(raw):
        match = _LABEL.match(raw, position)
        assert match is not None, f"line {number}: bad labels {raw!r}"
        value = re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)], match.group(2))
        found.append((match.group(1), value))
        position = match.end()
    return tuple(found)

"""Device class (``mobile``, ``tablet``, ``desktop``) and whether it is a bot, from a user agent, with Matomo's
device detector.

``device_detector`` is the Python port of the Matomo project's detector: maintained, and it tells a
tablet from a phone by brand and model (a Galaxy Tab's agent names no "Tablet"), which patterns on the
agent string cannot. It is pure Python and slow to start (~2 s to load its rules, ~15 ms an agent), so it
runs on the driver over the distinct agents not classified before, never per event.
"""

from __future__ import annotations

from collections.abc import Iterable

TABLET = {"tablet"}
MOBILE = {"smartphone", "feature phone", "phablet", "wearable", "portable media player", "camera"}


def device_class(user_agent: str) -> str:
    """``tablet`` or ``mobile`` for those device types, ``desktop`` for everything else (TVs, consoles,
    unrecognised agents and bots included)."""
    from device_detector import DeviceDetector

    kind = DeviceDetector(user_agent, skip_bot_detection=True).parse().device_type()
    kind = str(getattr(kind, "value", kind) or "").lower()
    return "tablet" if kind in TABLET else "mobile" if kind in MOBILE else "desktop"


def is_bot(user_agent: str) -> bool:
    """A crawler, spider, monitor or other bot, by the detector's bot list."""
    from device_detector import DeviceDetector

    return bool(DeviceDetector(user_agent).parse().is_bot())


def device_classes(user_agents: Iterable[str]) -> list[tuple[str, str, bool]]:
    """(agent, class, is_bot) for each distinct agent."""
    return [(agent, device_class(agent), is_bot(agent)) for agent in sorted(set(user_agents))]

"""Sessionized product-analytics events that stay exact under late data: Dagster + PySpark + Delta Lake.

``sessions_assets.SessionsComponent`` is the whole graph for one data root, for a ``defs.yaml``; it is imported on
first use, so the command line's Dagster-free commands stay light.
"""

__all__ = ["SessionsComponent"]


def __getattr__(name: str):
    if name == "SessionsComponent":
        from sessions_assets.component import SessionsComponent

        return SessionsComponent
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__

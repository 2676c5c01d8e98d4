"""Where the command line keeps a data root's Dagster instance (runs, sensor cursors) and its Spark Connect server."""

from __future__ import annotations

import fcntl
from pathlib import Path


def instance_home(data_root: str) -> Path:
    """``$DAGSTER_HOME``, or ``<data root>/dagster_home`` for a local data root (``Settings.instance_home``)."""
    from sessions_assets.settings import Settings, SettingsError

    try:
        return Settings.model_construct(data_root=data_root).instance_home()
    except SettingsError as error:
        raise SystemExit(str(error)) from None


def open_instance(data_root: str):
    """The instance at ``instance_home``. Its storage is created under a file lock: two first runs at once would
    race in SQLite's schema set-up."""
    import dagster as dg

    home = instance_home(data_root)
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".instance.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return dg.DagsterInstance.from_config(str(home))

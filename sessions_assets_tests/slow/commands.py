"""The ``sessions-assets`` command as the slow tests start it: its own process, the caller's environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CLI = str(Path(sys.executable).parent / "sessions-assets")


def cli(*args: str, cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    """``sessions-assets ARGS`` in its own process, in ``cwd`` (where Spark may leave files); its output."""
    command = [CLI, *args]
    result = subprocess.run(
        command, cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, (
        f"sessions-assets {' '.join(args)} exited {result.returncode}:\n{result.stderr[-4000:]}"
    )
    return result.stdout

"""The instance a host project declares: the ``defs.yaml`` under the working folder whose ``SessionsComponent`` has
the key prefix a command was given. ``sessions-assets … --key-prefix P`` then runs with the attributes the code
location loads (data root, settings, Spark), not with a second copy of them in ``SESSIONS_*`` variables.

Only a command given a key prefix looks: an instance without one is this project's own, or one whose values the
environment gives.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import yaml
from pydantic import ValidationError

from sessions_assets.component import SessionsComponent, said
from sessions_assets.settings import Settings, SettingsError

# How a defs.yaml names the component (the package exports it; the module path works too).
TYPES = ("sessions_assets.SessionsComponent", "sessions_assets.component.SessionsComponent")
# Folders no code location's definitions are in (a local data root's among them).
SKIPPED = ("node_modules", "__pycache__", "site-packages", "dagster_home", "landing", "warehouse")


class DeclaredError(ValueError):
    """The instance cannot be told from its defs.yaml: the file and why, in one line."""


def defs_files(root: Path) -> Iterator[Path]:
    """Every ``defs.yaml`` under ``root``, hidden folders (a virtual environment, ``.git``) and ``SKIPPED`` left
    out."""
    for folder, subfolders, files in os.walk(root):
        if "_delta_log" in subfolders:  # a Delta table
            subfolders[:] = []
        subfolders[:] = sorted(d for d in subfolders if not d.startswith(".") and d not in SKIPPED)
        if "defs.yaml" in files:
            yield Path(folder) / "defs.yaml"


def declared(key_prefix: str, root: Path) -> tuple[Path, SessionsComponent] | None:
    """The ``defs.yaml`` under ``root`` that declares the instance ``key_prefix``, and the component as the code
    location resolves it (``{{ env.NAME }}`` templates read now); None when none does."""
    found = []
    for path in defs_files(root):
        try:
            documents = list(yaml.safe_load_all(path.read_text()))
        except (OSError, yaml.YAMLError):
            continue  # not this command's to judge: `dg check defs` says what is wrong with it
        for document in documents:
            if not isinstance(document, dict) or document.get("type") not in TYPES:
                continue
            attributes = document.get("attributes") or {}
            if not isinstance(attributes, dict):
                continue
            prefix = attributes.get("key_prefix") or ""
            if isinstance(prefix, str) and "{{" in prefix:  # a template: the prefix it gives now
                prefix = _resolved(path, {"key_prefix": prefix}).key_prefix
            if prefix == key_prefix:
                found.append((path, attributes))
    if not found:
        return None
    if len(found) > 1:
        paths = ", ".join(str(p) for p, _ in found)
        raise DeclaredError(f"key prefix {key_prefix!r} is declared in {len(found)} defs.yaml ({paths}): one per site")
    path, attributes = found[0]
    return path, _resolved(path, attributes)


def _resolved(path: Path, attributes: dict) -> SessionsComponent:
    try:
        return SessionsComponent.resolve_from_dict(attributes)
    except ValidationError as error:  # an unknown attribute, a value of the wrong type
        problems = (f"attributes.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        raise DeclaredError(f"{path}: {'; '.join(problems)}") from None
    except Exception as error:  # a template Dagster cannot resolve: its message, on one line
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        raise DeclaredError(f"{path}: {' '.join(lines)[:400] or type(error).__name__}") from None


def settings_of(path: Path, component: SessionsComponent, **given) -> Settings:
    """The declared instance's settings, ``given`` over its attributes; a mistake names the file and attribute."""
    try:
        return component.settings(**given)
    except SettingsError as error:
        raise DeclaredError(f"{path}: {said(error)}") from None

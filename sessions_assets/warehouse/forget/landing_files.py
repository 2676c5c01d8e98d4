"""The landing files holding forgotten persons' lines: found, and on request written again without them."""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass, field

from sessions_assets.engine import accept, privacy
from sessions_assets.warehouse import journal
from sessions_assets.warehouse.delta import Warehouse
from sessions_assets.warehouse.ingest import read_lines


@dataclass
class LandingScan:
    """The landing files holding lines of forgotten persons: how many each, and those that cannot be rewritten."""

    files: dict[str, int] = field(default_factory=dict)  # file URI -> forgotten lines
    unreadable: list[str] = field(default_factory=list)  # files not read whole: left as they are
    rewritten: list[str] = field(default_factory=list)


# Hadoop's line breaks, as Spark's text reader (and so every ingest) splits lines.
_LINE_BREAKS = re.compile(r"\r\n|\r|\n")


def scan_landing(wh: Warehouse, key: bytes, rewrite: bool = False) -> LandingScan:
    """Read every readable landing file (one Spark read of the whole landing zone), find the lines the journal
    forgets, and with ``rewrite`` write each file holding some again without them. The collector's files are
    otherwise never written: a rewritten file changes its day's fingerprint, and the day's next ingest stores what
    the tables hold already (its forgotten lines were never stored)."""
    listed = journal.suppression(wh)
    found = LandingScan()
    if not listed:
        return found
    zone = wh.storage.zone()
    days = sorted({f.day for f in zone.folders if f.day is not None and f.problem is None})
    files = [f for day in days for f in wh.storage.landing_files(day, zone) if f.skip_reason is None]
    lines, _, broken, staged = read_lines(wh, files)
    try:
        parsed = accept.parse(lines).select("payload", "source_file", "user_id", "anonymous_id")
        users, devices = listed.frames(wh)
        marked = privacy.mark(privacy.with_hashes(parsed, key), users, devices).where("forgotten")
        doomed: dict[str, set[str]] = {}
        for row in marked.select("source_file", "payload").collect():
            found.files[row.source_file] = found.files.get(row.source_file, 0) + 1
            doomed.setdefault(row.source_file, set()).add(row.payload)
    finally:
        for uri in staged:
            wh.storage.fs.rm(uri, recursive=True)
    found.unreadable = sorted({f.uri for f, _, _ in broken} & set(found.files))
    if rewrite:
        for uri in sorted(set(doomed) - set(found.unreadable)):
            if _rewrite(wh, uri, doomed[uri]):
                found.rewritten.append(uri)
            else:
                found.unreadable.append(uri)
    return found


def _rewrite(wh: Warehouse, uri: str, doomed: set[str]) -> bool:
    """Write a landing file again without the ``doomed`` lines (next to it under a hidden name, which no ingest
    reads, then moved over it); False when it is not UTF-8 text, which an ingest would not read as it is here."""
    fs, path = wh.storage.fs, wh.storage.path_of(uri)
    data = fs.cat_file(path)
    zipped = path.endswith(".gz")
    try:
        text = (gzip.decompress(data) if zipped else data).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError):
        return False
    lines = _LINE_BREAKS.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    kept = "".join(line + "\n" for line in lines if line not in doomed).encode("utf-8")
    folder, name = path.rsplit("/", 1)
    staged = f"{folder}/.{name}.forgetting"
    with fs.open(staged, "wb") as f:
        f.write(gzip.compress(kept, mtime=0) if zipped else kept)
    fs.mv(staged, path)
    return True

"""The data root as URIs: the landing zone's folders and files, and where each table lives.

The landing zone is laid out as the collector writes it (``LAYOUTS``): ``received_date=YYYY-MM-DD/`` folders, or
Segment's S3 destination, ``segment-logs/<source-id>/<day in ms>/``, where a received day is that day's folder of
every source. Either way the rest of the pipeline sees received days, each a list of files and one fingerprint.

Everything that touches a path goes through ``fsspec``, so a local directory and an object store
(``s3a://``, ``abfss://``, ``gs://``) behave alike; fsspec takes the same URI schemes as Spark and needs
no JVM, so sensors can list the landing zone without starting Spark. A file's fingerprint is what the
store says changes with its content: the ETag (or checksum) on object stores, the inode change time
locally (an edit in place changes it even when size and modification time are restored).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from datetime import date, timedelta

from fsspec.core import url_to_fs

# ``auto``: whichever of the two the landing zone holds (both at once is refused: ``LayoutError``).
from sessions_assets.settings import LAYOUTS

LANDING = "landing"
WAREHOUSE = "warehouse"
FOLDER = re.compile(r"received_date=(\d{4}-\d{2}-\d{2})")
SEGMENT = "segment-logs"
# What the landing zone may hold; ``.gz`` is decompressed by Spark. Segment names its files ``<...>.gz``.
READABLE_SUFFIXES = {"received_date": (".jsonl", ".json", ".jsonl.gz"), "segment": (".gz", ".jsonl", ".json")}
DAY_MS = 86_400_000
# Store metadata that changes with a file's content, most specific first.
_CONTENT_KEYS = ("ETag", "etag", "md5Hash", "content_md5", "crc32c", "created")


def as_uri(location: str) -> str:
    """A local path as an absolute ``file:/...`` URI (Hadoop's spelling); other URIs as given, without a trailing /."""
    if "://" in location:
        return location.rstrip("/") if not location.startswith("file://") else as_uri(location[len("file://") :])
    if location.startswith("file:"):
        location = location[len("file:") :]
    return "file:" + os.path.abspath(os.path.expanduser(location))


class LayoutError(ValueError):
    """The landing zone holds both layouts and no setting says which to read; the message says what to do."""


@dataclass(frozen=True)
class LandingFile:
    uri: str
    name: str  # within its received day: the file's name, prefixed with its source in Segment's layout
    fingerprint: str
    # Why the file is not read ('skipped_file': a hidden or unsupported name; 'unreadable_file': the store
    # cannot describe it, e.g. a broken link), or None.
    skip_reason: str | None = None
    detail: str | None = None
    source_id: str | None = None  # the Segment source whose folder holds it


@dataclass(frozen=True)
class LandingFolder:
    uri: str
    name: str
    day: date | None  # None: the name is not a received day
    problem: str | None = None


class Storage:
    """The data root: received days' files in ``landing/`` (``layout``: one of ``LAYOUTS``), ``warehouse/<table>``
    out."""

    def __init__(self, data_root: str, layout: str = "auto"):
        if layout not in LAYOUTS:
            raise LayoutError(f"SESSIONS_LANDING_LAYOUT={layout}: takes {', '.join(LAYOUTS)}")
        self.root = as_uri(data_root)
        self._layout = layout
        # No cached listings: Spark writes the tables behind fsspec's back, and a Delta log listed from an
        # object store's cache (s3fs, gcsfs, adlfs keep one per client) would hide the newest commits.
        self.fs, self._root_path = url_to_fs(self.root, use_listings_cache=False)

    @property
    def landing(self) -> str:
        return f"{self.root}/{LANDING}"

    def table_uri(self, name: str) -> str:
        return f"{self.root}/{WAREHOUSE}/{name}"

    def _uri(self, path: str) -> str:
        """A path as the store returns it -> a URI Spark and fsspec both take."""
        if self.root.startswith("file:"):
            return "file:" + path
        # Under the root, keep the root's own spelling: some stores drop part of it from their paths
        # (adlfs lists ``container/x`` for ``abfss://container@account.dfs.core.windows.net/x``).
        path, base = path.rstrip("/"), self._root_path.rstrip("/")
        if path == base or path.startswith(base + "/"):
            return self.root + path[len(base) :]
        return f"{self.root.split('://', 1)[0]}://{path}"

    def root_exists(self) -> bool:
        return self.fs.isdir(self._root_path)

    def landing_exists(self) -> bool:
        return self.fs.isdir(f"{self._root_path}/{LANDING}")

    def _children(self, path: str) -> list[tuple[str, dict]]:
        """``(name, info)`` of each entry of a folder, or none when it is not one."""
        if not self.fs.isdir(path):
            return []
        return [(info["name"].rstrip("/").rsplit("/", 1)[-1], info) for info in self.fs.ls(path, detail=True)]

    @property
    def layout(self) -> str:
        """``received_date`` or ``segment``: as set, else as found (``LayoutError`` when both are found)."""
        if self._layout != "auto":
            return self._layout
        names = {name for name, info in self._children(f"{self._root_path}/{LANDING}") if info["type"] == "directory"}
        if SEGMENT in names and any(FOLDER.fullmatch(n) for n in names):
            raise LayoutError(
                f"{self.landing} holds both received_date=YYYY-MM-DD/ folders and {SEGMENT}/: set "
                "SESSIONS_LANDING_LAYOUT to the one to read (received_date or segment)"
            )
        return "segment" if SEGMENT in names else "received_date"

    def landing_folders(self) -> list[LandingFolder]:
        """Every folder of the landing zone, oldest received day first; those that are not a received day's last
        (with what is wrong). In Segment's layout a received day has a folder per source."""
        layout, folders = self.layout, []
        for name, info in self._children(f"{self._root_path}/{LANDING}"):
            if info["type"] != "directory":
                continue
            uri = self._uri(info["name"].rstrip("/"))
            if layout == "segment" and name == SEGMENT:
                folders += self._source_folders(info["name"].rstrip("/"))
                continue
            match = FOLDER.fullmatch(name) if layout == "received_date" else None
            day, problem = None, None
            if match is None:
                problem = (
                    "not named received_date=YYYY-MM-DD"
                    if layout == "received_date"
                    else f"not {SEGMENT}/ (SESSIONS_LANDING_LAYOUT=segment)"
                )
            else:
                try:
                    day = date.fromisoformat(match.group(1))
                except ValueError:
                    problem = f"{match.group(1)} is not a calendar day"
            folders.append(LandingFolder(uri, name, day, problem))
        return sorted(folders, key=lambda f: (f.day is None, f.day or date.max, f.name))

    def _source_folders(self, path: str) -> list[LandingFolder]:
        """``segment-logs/<source-id>/<day in ms>`` folders; an empty source folder is reported."""
        found = []
        for source, info in self._children(path):
            if info["type"] != "directory" or source.startswith((".", "_")):  # a marker, an upload in progress
                continue
            name = f"{SEGMENT}/{source}"
            days = [(n, i) for n, i in self._children(info["name"].rstrip("/")) if i["type"] == "directory"]
            if not days:
                problem = "an empty source folder (no <day in ms> folder in it)"
                found.append(LandingFolder(self._uri(info["name"].rstrip("/")), name, None, problem))
            for folder, day_info in days:
                day = _segment_day(folder)
                problem = None if day else f"{folder} is not the millisecond start of a UTC day"
                found.append(LandingFolder(self._uri(day_info["name"].rstrip("/")), f"{name}/{folder}", day, problem))
        return found

    def folder(self, day: date, source: str | None = None) -> str:
        """A received day's folder (in Segment's layout, one source's)."""
        if source is not None:
            return f"{self.landing}/{SEGMENT}/{source}/{_segment_folder(day)}"
        return f"{self.landing}/received_date={day.isoformat()}"

    def landing_files(self, day: date) -> list[LandingFile]:
        """The files of one received day (of every source), with what each would be read as, sorted by name."""
        layout = self.layout
        if layout == "received_date":
            return self._files(self.folder(day), None, READABLE_SUFFIXES[layout])
        sources = [
            name
            for name, info in self._children(f"{self._root_path}/{LANDING}/{SEGMENT}")
            if info["type"] == "directory" and not name.startswith((".", "_"))
        ]
        files = [
            f for source in sources for f in self._files(self.folder(day, source), source, READABLE_SUFFIXES[layout])
        ]
        return sorted(files, key=lambda f: f.name)

    def _files(self, folder: str, source: str | None, suffixes: tuple[str, ...]) -> list[LandingFile]:
        path, prefix = url_to_fs(folder)[1], f"{source}/" if source else ""
        files = []
        for name, info in self._children(path):
            if info["type"] == "directory":  # reported, so that no line in it goes unaccounted for
                detail = "a folder: a received day's files are read from its own folder, not from subfolders"
                name = prefix + name
                files.append(
                    LandingFile(self._uri(info["name"]), name, f"{name}:folder", "skipped_file", detail, source)
                )
                continue
            files.append(self._describe(info, prefix + name, source, suffixes))
        return sorted(files, key=lambda f: f.name)

    def _describe(self, info: dict, name: str, source: str | None, suffixes: tuple[str, ...]) -> LandingFile:
        uri, base = self._uri(info["name"]), name.rsplit("/", 1)[-1]
        if info.get("islink") or info["type"] != "file":
            try:  # follow a link to what it points at
                info = {**self.fs.info(os.path.realpath(info["name"])), "name": info["name"]}
            except (OSError, ValueError) as error:
                return LandingFile(uri, name, f"{name}:unreadable", "unreadable_file", _reason(error), source)
        fingerprint = f"{name}:{info.get('size')}:{_content_marker(info)}"
        if base.startswith((".", "_")):
            detail = "hidden name (starts with '.' or '_'): an upload in progress or a marker file"
            return LandingFile(uri, name, fingerprint, "skipped_file", detail, source)
        if not base.endswith(suffixes):
            detail = f"not one of {', '.join(suffixes)}"
            return LandingFile(uri, name, fingerprint, "skipped_file", detail, source)
        return LandingFile(uri, name, fingerprint, source_id=source)

    def fingerprint(self, day: date) -> str:
        """Changes when a received day's folder (in Segment's layout, any source's) gains, loses or changes a file."""
        digest = hashlib.sha256()
        for file in self.landing_files(day):
            digest.update(f"{file.fingerprint}\n".encode())
        return digest.hexdigest()[:16]

    def path_of(self, uri: str) -> str:
        """A URI as this store's path (what ``fs`` methods take)."""
        return url_to_fs(uri)[1]

    def write(self, uri: str, data: bytes) -> None:
        """Write a file (for sample data), creating its folder."""
        path = url_to_fs(uri)[1]
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        with self.fs.open(path, "wb") as f:
            f.write(data)


def _segment_day(folder: str) -> date | None:
    """The received day a Segment folder names: the Unix milliseconds of its UTC midnight, written as Segment
    writes it (ASCII digits, no leading zero), else None."""
    if not re.fullmatch(r"[1-9][0-9]*", folder) or int(folder) % DAY_MS:
        return None
    try:
        day = date(1970, 1, 1) + timedelta(days=int(folder) // DAY_MS)
    except OverflowError:
        return None
    return day if _segment_folder(day) == folder else None


def _segment_folder(day: date) -> str:
    return str((day - date(1970, 1, 1)).days * DAY_MS)


def _content_marker(info: dict) -> str:
    for key in _CONTENT_KEYS:
        if info.get(key) not in (None, ""):
            return f"{info.get('mtime', '')}:{info[key]}"
    return str(info.get("mtime") or info.get("LastModified") or info.get("last_modified") or "")


def _reason(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"

"""The data root as URIs: the landing zone's folders and files, and where each table lives.

The landing zone is laid out as the collector writes it (a ``Layout``, ``layouts.py``): ``received_date=YYYY-MM-DD/``
folders, or Segment's S3 destination, ``segment-logs/<source-id>/<day in ms>/``, where a received day is that day's
folder of every source. Either way the rest of the pipeline sees received days, each a list of files and one
fingerprint.

Everything that touches a path goes through ``fsspec``, so a local directory and an object store
(``s3a://``, ``abfss://``, ``gs://``) behave alike; fsspec takes the same URI schemes as Spark and needs
no JVM, so sensors can list the landing zone without starting Spark. A file's fingerprint is what the
store says changes with its content: the ETag (or checksum) on object stores, the inode change time
locally (an edit in place changes it even when size and modification time are restored).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from datetime import date

from fsspec.core import url_to_fs

from sessions_assets.settings import Settings
from sessions_assets.warehouse.layouts import (
    CHOICES,
    HIDDEN,
    LANDING,
    LAYOUTS,
    LandingFolder,
    Layout,
    LayoutError,
    detect,
)

WAREHOUSE = "warehouse"
# Store metadata that changes with a file's content, most specific first.
_CONTENT_KEYS = ("ETag", "etag", "md5Hash", "content_md5", "crc32c", "created")


def as_uri(location: str) -> str:
    """A local path as an absolute ``file:/...`` URI (Hadoop's spelling); other URIs as given, without a trailing /."""
    if "://" in location:
        return location.rstrip("/") if not location.startswith("file://") else as_uri(location[len("file://") :])
    if location.startswith("file:"):
        location = location[len("file:") :]
    return "file:" + os.path.abspath(os.path.expanduser(location))


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
class LandingZone:
    """The landing zone as one listing of its folders found it: its layout and every folder, oldest day first."""

    layout: Layout
    folders: list[LandingFolder]

    def folders_of(self, day: date) -> list[LandingFolder]:
        """A received day's folders (in Segment's layout, one per source that has one)."""
        return [f for f in self.folders if f.day == day and f.problem is None]


class Storage:
    """The data root: received days' files in ``landing/`` (``layout``: one of ``layouts.CHOICES``),
    ``warehouse/<table>`` out."""

    def __init__(self, data_root: str, layout: str = "auto"):
        if layout not in CHOICES:
            raise LayoutError(f"SESSIONS_LANDING_LAYOUT={layout}: takes {', '.join(CHOICES)}")
        self.root = as_uri(data_root)
        self._layout = LAYOUTS.get(layout)  # None: auto
        # No cached listings: Spark writes the tables behind fsspec's back, and a Delta log listed from an
        # object store's cache (s3fs, gcsfs, adlfs keep one per client) would hide the newest commits.
        self.fs, self._root_path = url_to_fs(self.root, use_listings_cache=False)

    @classmethod
    def of(cls, settings: Settings) -> Storage:
        """The data root of ``settings``, its landing zone read in their layout."""
        return cls(settings.data_root, settings.landing_layout)

    @property
    def landing(self) -> str:
        return f"{self.root}/{LANDING}"

    def table_uri(self, name: str) -> str:
        return f"{self.root}/{WAREHOUSE}/{name}"

    def uri(self, path: str) -> str:
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
        """``(name, info)`` of each entry of a folder, or none when it is not one. One listing: on an object store
        one request (an ``isdir`` first would cost another, for every folder listed)."""
        try:
            entries = self.fs.ls(path, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []
        if len(entries) == 1 and entries[0]["type"] != "directory" and _same(entries[0]["name"], path):
            return []  # a file, which a listing describes
        return [(info["name"].rstrip("/").rsplit("/", 1)[-1], info) for info in entries]

    def folders_in(self, path: str) -> list[tuple[str, str]]:
        """``(name, path)`` of each subfolder of a folder, or none when it is not one."""
        return [(name, info["name"].rstrip("/")) for name, info in self._children(path) if info["type"] == "directory"]

    @property
    def layout(self) -> Layout:
        """As set, else as found (``LayoutError`` when two are found)."""
        return self._layout_of(self.folders_in(f"{self._root_path}/{LANDING}"))

    def _layout_of(self, top: list[tuple[str, str]]) -> Layout:
        return self._layout or detect(self.landing, {name for name, _ in top})

    def zone(self) -> LandingZone:
        """The layout and every folder of the landing zone, from one listing of ``landing/`` and of the layout's
        folders under it (in Segment's layout, ``segment-logs/`` and each source's): no received day's files."""
        top = self.folders_in(f"{self._root_path}/{LANDING}")
        layout = self._layout_of(top)
        folders = sorted(layout.folders(self, top), key=lambda f: (f.day is None, f.day or date.max, f.name))
        return LandingZone(layout, folders)

    def landing_folders(self) -> list[LandingFolder]:
        """Every folder of the landing zone, oldest received day first; those that are not a received day's last
        (with what is wrong). In Segment's layout a received day has a folder per source."""
        return self.zone().folders

    def folder(self, day: date, source: str | None = None) -> str:
        """A received day's folder (in Segment's layout, one source's): where ``generate`` writes it."""
        return self.layout.folder(self.landing, day, source)

    def landing_files(self, day: date, zone: LandingZone | None = None) -> list[LandingFile]:
        """The files of one received day (of every source), with what each would be read as, sorted by name.
        ``zone``: the landing zone as listed already, so that only the day's own folders are listed."""
        layout = zone.layout if zone else self.layout
        folders = zone.folders_of(day) if zone else layout.day_folders(self, day)
        files = [f for folder in folders for f in self._files(folder.uri, folder.source, layout.suffixes)]
        return sorted(files, key=lambda f: f.name)

    def _files(self, folder: str, source: str | None, suffixes: tuple[str, ...]) -> list[LandingFile]:
        path, prefix = url_to_fs(folder)[1], f"{source}/" if source else ""
        files = []
        for name, info in self._children(path):
            if info["type"] == "directory":  # reported, so that no line in it goes unaccounted for
                detail = "a folder: a received day's files are read from its own folder, not from subfolders"
                name = prefix + name
                files.append(
                    LandingFile(self.uri(info["name"]), name, f"{name}:folder", "skipped_file", detail, source)
                )
                continue
            files.append(self._describe(info, prefix + name, source, suffixes))
        return sorted(files, key=lambda f: f.name)

    def _describe(self, info: dict, name: str, source: str | None, suffixes: tuple[str, ...]) -> LandingFile:
        uri, base = self.uri(info["name"]), name.rsplit("/", 1)[-1]
        if info.get("islink") or info["type"] != "file":
            try:  # follow a link to what it points at
                info = {**self.fs.info(os.path.realpath(info["name"])), "name": info["name"]}
            except (OSError, ValueError) as error:
                return LandingFile(uri, name, f"{name}:unreadable", "unreadable_file", _reason(error), source)
        fingerprint = f"{name}:{info.get('size')}:{_content_marker(info)}"
        if base.startswith(HIDDEN):
            detail = "hidden name (starts with '.' or '_'): an upload in progress or a marker file"
            return LandingFile(uri, name, fingerprint, "skipped_file", detail, source)
        if not base.endswith(suffixes):
            detail = f"not one of {', '.join(suffixes)}"
            return LandingFile(uri, name, fingerprint, "skipped_file", detail, source)
        return LandingFile(uri, name, fingerprint, source_id=source)

    def fingerprint(self, day: date, zone: LandingZone | None = None) -> str:
        """Changes when a received day's folder (in Segment's layout, any source's) gains, loses or changes a file."""
        digest = hashlib.sha256()
        for file in self.landing_files(day, zone):
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


def _same(name: str, path: str) -> bool:
    return name.rstrip("/") == path.rstrip("/")


def _content_marker(info: dict) -> str:
    for key in _CONTENT_KEYS:
        if info.get(key) not in (None, ""):
            return f"{info.get('mtime', '')}:{info[key]}"
    return str(info.get("mtime") or info.get("LastModified") or info.get("last_modified") or "")


def _reason(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"

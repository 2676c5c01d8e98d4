"""The data root as URIs: the landing zone's folders and files, and where each table lives.

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
from datetime import date

from fsspec.core import url_to_fs

LANDING = "landing"
WAREHOUSE = "warehouse"
FOLDER = re.compile(r"received_date=(\d{4}-\d{2}-\d{2})")
# What the landing zone may hold; ``.gz`` is decompressed by Spark.
READABLE_SUFFIXES = (".jsonl", ".json", ".jsonl.gz")
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
    name: str
    fingerprint: str
    # Why the file is not read ('skipped_file': a hidden or unsupported name; 'unreadable_file': the store
    # cannot describe it, e.g. a broken link), or None.
    skip_reason: str | None = None
    detail: str | None = None


@dataclass(frozen=True)
class LandingFolder:
    uri: str
    name: str
    day: date | None  # None: the name is not a received day
    problem: str | None = None


class Storage:
    """The data root: ``landing/received_date=YYYY-MM-DD/*`` in, ``warehouse/<table>`` out."""

    def __init__(self, data_root: str):
        self.root = as_uri(data_root)
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

    def landing_folders(self) -> list[LandingFolder]:
        """Every folder of the landing zone, oldest received day first; misnamed ones last."""
        path = f"{self._root_path}/{LANDING}"
        if not self.fs.isdir(path):
            return []
        folders = []
        for info in self.fs.ls(path, detail=True):
            if info["type"] != "directory":
                continue
            name = info["name"].rstrip("/").rsplit("/", 1)[-1]
            match = FOLDER.fullmatch(name)
            day, problem = None, None
            if match is None:
                problem = "not named received_date=YYYY-MM-DD"
            else:
                try:
                    day = date.fromisoformat(match.group(1))
                except ValueError:
                    problem = f"{match.group(1)} is not a calendar day"
            folders.append(LandingFolder(self._uri(info["name"].rstrip("/")), name, day, problem))
        return sorted(folders, key=lambda f: (f.day is None, f.day or date.max, f.name))

    def folder(self, day: date) -> str:
        return f"{self.landing}/received_date={day.isoformat()}"

    def landing_files(self, day: date) -> list[LandingFile]:
        """The files of one received day, with what each would be read as, sorted by name."""
        path = url_to_fs(self.folder(day))[1]
        if not self.fs.isdir(path):
            return []
        files = []
        for info in self.fs.ls(path, detail=True):
            name = info["name"].rstrip("/").rsplit("/", 1)[-1]
            if info["type"] == "directory":  # reported, so that no line in it goes unaccounted for
                detail = "a folder: a received day's files are read from its own folder, not from subfolders"
                files.append(LandingFile(self._uri(info["name"]), name, f"{name}:folder", "skipped_file", detail))
                continue
            files.append(self._describe(info, name))
        return sorted(files, key=lambda f: f.name)

    def _describe(self, info: dict, name: str) -> LandingFile:
        uri = self._uri(info["name"])
        if info.get("islink") or info["type"] != "file":
            try:  # follow a link to what it points at
                info = {**self.fs.info(os.path.realpath(info["name"])), "name": info["name"]}
            except (OSError, ValueError) as error:
                return LandingFile(uri, name, f"{name}:unreadable", "unreadable_file", _reason(error))
        fingerprint = f"{name}:{info.get('size')}:{_content_marker(info)}"
        if name.startswith((".", "_")):
            detail = "hidden name (starts with '.' or '_'): an upload in progress or a marker file"
            return LandingFile(uri, name, fingerprint, "skipped_file", detail)
        if not name.endswith(READABLE_SUFFIXES):
            detail = f"not one of {', '.join(READABLE_SUFFIXES)}"
            return LandingFile(uri, name, fingerprint, "skipped_file", detail)
        return LandingFile(uri, name, fingerprint)

    def fingerprint(self, day: date) -> str:
        """Changes when a received day's folder gains, loses or changes a file."""
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


def _content_marker(info: dict) -> str:
    for key in _CONTENT_KEYS:
        if info.get(key) not in (None, ""):
            return f"{info.get('mtime', '')}:{info[key]}"
    return str(info.get("mtime") or info.get("LastModified") or info.get("last_modified") or "")


def _reason(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"

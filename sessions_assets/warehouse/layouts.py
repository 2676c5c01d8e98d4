"""How a collector lays received days out under ``landing/``: one class per layout, behind one seam.

A layout names and parses the folders (which received day each holds, or what is wrong with it), finds a received
day's folders, says which file names are readable, and says where ``generate`` writes a day. ``Storage`` keeps the
paths, the URIs and fsspec, and asks the layout; the rest of the pipeline sees received days. Another collector's
layout is one more ``Layout`` in ``LAYOUTS``.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import date, timedelta
from typing import ClassVar, Protocol

LANDING = "landing"
HIDDEN = (".", "_")  # a name starting so is a marker or an upload in progress


class LayoutError(ValueError):
    """The landing zone holds two layouts and no setting says which to read; the message says what to do."""


@dataclass(frozen=True)
class LandingFolder:
    uri: str
    name: str  # under landing/
    day: date | None  # None: the name is not a received day
    problem: str | None = None
    source: str | None = None  # the collector's source whose folder it is (Segment's layout)

    @property
    def parent(self) -> str:
        """The folder whose listing finds it, under the data root (``landing``, ``landing/segment-logs/web``)."""
        head = self.name.rpartition("/")[0]
        return f"{LANDING}/{head}" if head else LANDING


class Store(Protocol):
    """What a layout asks of the store (``Storage``): folders by path, and URIs for them."""

    @property
    def landing(self) -> str: ...

    def folders_in(self, path: str) -> list[tuple[str, str]]: ...

    def uri(self, path: str) -> str: ...

    def path_of(self, uri: str) -> str: ...


class Layout(ABC):
    """One collector's folders under ``landing/``. ``top`` is ``landing/``'s subfolders as ``(name, path)``."""

    name: ClassVar[str]  # the value of SESSIONS_LANDING_LAYOUT that selects it
    found: ClassVar[str]  # its folders as a message naming two layouts at once calls them
    suffixes: ClassVar[tuple[str, ...]]  # what a readable file's name ends with (``.gz`` is decompressed by Spark)

    @abstractmethod
    def holds(self, names: set[str]) -> bool:
        """Whether folders of this layout are among ``landing/``'s subfolders: what ``auto`` reads."""

    @abstractmethod
    def folders(self, store: Store, top: list[tuple[str, str]]) -> list[LandingFolder]:
        """Every folder of the landing zone as this layout reads it: a received day's, or one with a problem."""

    @abstractmethod
    def day_folders(self, store: Store, day: date) -> list[LandingFolder]:
        """The folders a received day's files are in (some may not exist), found without listing every day."""

    @abstractmethod
    def folder(self, landing: str, day: date, source: str | None = None) -> str:
        """The URI of a received day's folder (of one source where the layout has sources): where ``generate``
        writes the day."""


class ReceivedDateLayout(Layout):
    """Ours: a folder per received day, ``received_date=YYYY-MM-DD/``."""

    name = "received_date"
    found = "received_date=YYYY-MM-DD/ folders"
    suffixes = (".jsonl", ".json", ".jsonl.gz")
    pattern = re.compile(r"received_date=(\d{4}-\d{2}-\d{2})")

    def holds(self, names: set[str]) -> bool:
        return any(self.pattern.fullmatch(name) for name in names)

    def folders(self, store: Store, top: list[tuple[str, str]]) -> list[LandingFolder]:
        return [self._parse(store.uri(path), name) for name, path in top]

    def _parse(self, uri: str, name: str) -> LandingFolder:
        match = self.pattern.fullmatch(name)
        if match is None:
            return LandingFolder(uri, name, None, "not named received_date=YYYY-MM-DD")
        try:
            return LandingFolder(uri, name, date.fromisoformat(match.group(1)))
        except ValueError:
            return LandingFolder(uri, name, None, f"{match.group(1)} is not a calendar day")

    def day_folders(self, store: Store, day: date) -> list[LandingFolder]:
        uri = self.folder(store.landing, day)
        return [LandingFolder(uri, uri.rsplit("/", 1)[-1], day)]

    def folder(self, landing: str, day: date, source: str | None = None) -> str:
        if source is not None:
            raise ValueError(f"the {self.name} layout has no sources (given {source})")
        return f"{landing}/received_date={day.isoformat()}"


class SegmentLayout(Layout):
    """Segment's S3 destination, as it writes: ``segment-logs/<source-id>/<day in ms>/``, the day's Unix
    milliseconds of its UTC midnight; a received day is that day's folder of every source."""

    name = "segment"
    root = "segment-logs"
    found = f"{root}/"
    suffixes = (".gz", ".jsonl", ".json")  # Segment names its files <...>.gz
    day_ms = 86_400_000

    def holds(self, names: set[str]) -> bool:
        return self.root in names

    def folders(self, store: Store, top: list[tuple[str, str]]) -> list[LandingFolder]:
        found, other = [], f"not {self.root}/ (SESSIONS_LANDING_LAYOUT={self.name})"
        for name, path in top:
            if name == self.root:
                found += [f for source, at in self._sources(store, path) for f in self._days(store, source, at)]
            else:
                found.append(LandingFolder(store.uri(path), name, None, other))
        return found

    def _sources(self, store: Store, path: str) -> list[tuple[str, str]]:
        """``(source, path)`` of each source folder, hidden ones skipped."""
        return [(source, at) for source, at in store.folders_in(path) if not source.startswith(HIDDEN)]

    def _days(self, store: Store, source: str, path: str) -> list[LandingFolder]:
        """A source's ``<day in ms>`` folders; an empty source folder is reported."""
        name, days = f"{self.root}/{source}", store.folders_in(path)
        if not days:
            problem = "an empty source folder (no <day in ms> folder in it)"
            return [LandingFolder(store.uri(path), name, None, problem, source)]
        found = []
        for folder, at in days:
            day = self.day_of(folder)
            problem = None if day else f"{folder} is not the millisecond start of a UTC day"
            found.append(LandingFolder(store.uri(at), f"{name}/{folder}", day, problem, source))
        return found

    def day_folders(self, store: Store, day: date) -> list[LandingFolder]:
        sources = self._sources(store, store.path_of(f"{store.landing}/{self.root}"))
        return [
            LandingFolder(self.folder(store.landing, day, s), f"{self.root}/{s}/{self.millis(day)}", day, source=s)
            for s, _ in sources
        ]

    def folder(self, landing: str, day: date, source: str | None = None) -> str:
        if source is None:
            raise ValueError(f"the {self.name} layout has a folder per source: name one")
        return f"{landing}/{self.root}/{source}/{self.millis(day)}"

    def day_of(self, folder: str) -> date | None:
        """The received day a folder names, written as Segment writes it (ASCII digits, no leading zero), else
        None."""
        if not re.fullmatch(r"[1-9][0-9]*", folder) or int(folder) % self.day_ms:
            return None
        try:
            day = date(1970, 1, 1) + timedelta(days=int(folder) // self.day_ms)
        except OverflowError:
            return None
        return day if self.millis(day) == folder else None

    def millis(self, day: date) -> str:
        return str((day - date(1970, 1, 1)).days * self.day_ms)


# Ours first: what ``auto`` reads when landing/ holds no layout's folders.
LAYOUTS: dict[str, Layout] = {layout.name: layout for layout in (ReceivedDateLayout(), SegmentLayout())}
CHOICES = ("auto", *LAYOUTS)  # what SESSIONS_LANDING_LAYOUT takes


def detect(landing: str, names: set[str]) -> Layout:
    """The layout whose folders ``landing/`` holds (ours when none does); two at once are refused."""
    found = [layout for layout in LAYOUTS.values() if layout.holds(names)]
    if len(found) > 1:
        folders = [layout.found for layout in found]
        held = ("both " if len(folders) == 2 else "") + f"{', '.join(folders[:-1])} and {folders[-1]}"
        choose = " or ".join(layout.name for layout in found)
        raise LayoutError(f"{landing} holds {held}: set SESSIONS_LANDING_LAYOUT to the one to read ({choose})")
    return found[0] if found else next(iter(LAYOUTS.values()))

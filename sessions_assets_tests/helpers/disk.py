"""What the files under a folder hold, read as bytes and as values: Parquet files (live, superseded, change-data and
checkpoints) decoded with pyarrow, gzip files inflated, everything else (Delta's commits and checksums, deletion
vectors, landing lines) as it is."""

from __future__ import annotations

import gzip
from pathlib import Path


def _values(path: Path) -> list[str]:
    """Every value of a Parquet file, as text (nested values flattened by their Python form)."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    return [str(v) for column in table.columns for v in column.to_pylist() if v is not None]


def files_quoting(folder: Path, needles: list[str]) -> list[tuple[str, str]]:
    """(file, needle) for each file under ``folder`` (hidden ones included) that holds a needle in its bytes or, for
    a Parquet file, in one of its values."""
    found = []
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        data = path.read_bytes()
        if path.suffix == ".gz":
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError):
                pass
        texts = [data.decode("utf-8", "replace")]
        if path.suffix == ".parquet":
            texts += _values(path)
        for needle in needles:
            if any(needle in text for text in texts):
                found.append((str(path.relative_to(folder)), needle))
    return found

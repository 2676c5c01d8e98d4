"""Materialization metadata the UI renders: rows of plain values as a table."""

import dagster as dg


def table(rows: list[dict]) -> dg.MetadataValue:
    """Rows (dicts with the same keys) as a table; a column is ``int`` when the first row's value is one."""
    columns = list(rows[0]) if rows else ["value"]
    schema = dg.TableSchema(
        columns=[dg.TableColumn(c, "int" if rows and isinstance(rows[0][c], int) else "string") for c in columns]
    )
    return dg.MetadataValue.table([dg.TableRecord(row) for row in rows], schema=schema)

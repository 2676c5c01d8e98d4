"""Column lists written as DDL (``"name type, ..."``), read into Spark schemas without a Spark session: each
table's columns are declared once, beside the code that produces them, and imported where they are stored."""

from __future__ import annotations

import re

from pyspark.sql import types as T

_TYPES = {
    "string": T.StringType(),
    "timestamp": T.TimestampType(),
    "date": T.DateType(),
    "long": T.LongType(),
    "boolean": T.BooleanType(),
    "double": T.DoubleType(),
    "int": T.IntegerType(),
    "array<date>": T.ArrayType(T.DateType()),
    "array<string>": T.ArrayType(T.StringType()),
    "map<string,long>": T.MapType(T.StringType(), T.LongType()),
    "decimal(38,6)": T.DecimalType(38, 6),  # money: revenue
}


def schema(ddl: str) -> T.StructType:
    """``"name type, ..."`` -> a StructType (every column nullable)."""
    columns = re.split(r",(?![^(<]*[)>])", ddl)  # not the comma inside decimal(38,6) or map<k,v>
    return T.StructType([T.StructField(n, _TYPES[t]) for n, t in (c.split() for c in columns)])

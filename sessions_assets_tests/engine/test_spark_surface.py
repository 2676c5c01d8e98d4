"""Pipeline code must run unchanged over Spark Connect, where there is no JVM on the client side.

Only `warehouse/spark.py` starts or attaches to Spark; everything else goes through DataFrames and SQL.
"""

import ast
from pathlib import Path

import pytest

import sessions_assets

PACKAGE = Path(sessions_assets.__file__).parent
SPARK_START = PACKAGE / "warehouse" / "spark.py"

# Names that only exist on a classic driver: py4j handles and delta-spark's JVM-backed table API.
JVM_ATTRIBUTES = {"_jvm", "_jsc", "_jdf", "_jsparkSession", "_jconf", "_gateway", "sparkContext"}
JVM_MODULES = ("delta.tables", "delta.pip_utils", "py4j")


def jvm_reaches(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Attribute) and node.attr in JVM_ATTRIBUTES:
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
        modules = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module]
        found += [f"{path.name}:{node.lineno} import {m}" for m in modules if m.startswith(JVM_MODULES)]
    return found


def pipeline_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p != SPARK_START)


@pytest.mark.parametrize("path", pipeline_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_pipeline_code_never_reaches_the_jvm(path):
    assert jvm_reaches(path) == []


def test_the_guard_sees_a_jvm_call(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from delta.tables import DeltaTable\nspark.sparkContext._jsc.sc()\n")
    assert sorted(jvm_reaches(sample)) == [
        "sample.py:1 import delta.tables",
        "sample.py:2 ._jsc",
        "sample.py:2 .sparkContext",
    ]

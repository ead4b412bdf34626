"""Fixtures for the checker's tests.

One SparkSession for the whole pytest session (JVM start-up costs seconds);
the Spark tests then check many histories per Spark job. The lead may move
`spark` into the project's pytest plugin: the checker only needs a session.
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # reports_histgen


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    from reports.spark_checker import get_spark

    session = get_spark()
    yield session
    session.stop()

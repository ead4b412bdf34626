"""Fixtures for the checker's tests.

The SparkSession is the chaoslog plugin's `spark` fixture: one for the whole
pytest session (JVM start-up costs seconds); the Spark tests then check many
histories per Spark job.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))  # reports_histgen

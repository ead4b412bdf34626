"""chaoslog's checker: reads run histories (docs/history-format.md) and
judges them by docs/anomalies.md.

Entry points: `analyze` (check runs, write summary.json / report.html /
junit.xml), `reports.cli` (the `analyze` command), `reports.validate` (rules
of the history format), `reports.aggregate` (nightly overview). The package
imports nothing from the rest of the project; pyspark is only loaded by the
Spark checker.
"""

from reports.errors import HistoryError, HistoryWarning


def analyze(run_dirs, out=None, master=None, spark=None, **kwargs):
    """See reports.api.analyze (imported lazily so that `import reports` stays light)."""
    from reports.api import analyze as _analyze

    return _analyze(run_dirs, out=out, master=master, spark=spark, **kwargs)


def __getattr__(name):
    if name == "RunVerdict":
        from reports.api import RunVerdict

        return RunVerdict
    raise AttributeError(name)


__all__ = ["HistoryError", "HistoryWarning", "RunVerdict", "analyze"]

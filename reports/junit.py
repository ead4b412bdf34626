"""JUnit XML for CI: one testcase per anomaly type, failures carrying the instances.

CI systems already know how to show JUnit; a run then appears as a suite whose
failed cases are its fatal anomaly types. Non-fatal findings pass but carry
their instances in system-out; incomplete final reads are a skipped case.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from reports.summary import ANOMALY_TYPES

MAX_LISTED = 200  # instances written into one failure message body


def _instances_text(summary: dict, kind: str) -> str:
    items = summary["anomalies"][kind]
    lines = [json.dumps(a, sort_keys=True) for a in items[:MAX_LISTED]]
    rest = summary["anomaly_counts"][kind] - len(lines)
    if rest > 0:
        lines.append(f"... and {rest} more")
    return "\n".join(lines)


def build(summaries: list[dict]) -> ET.ElementTree:
    root = ET.Element("testsuites", name="chaoslog")
    t_tests = t_fail = t_skip = 0
    for s in summaries:
        name = f"chaoslog.{s['run']}"
        suite = ET.SubElement(root, "testsuite", name=name)
        props = ET.SubElement(suite, "properties")
        for k in ("verdict", "checker"):
            ET.SubElement(props, "property", name=k, value=str(s[k]))
        tests = fails = skips = 0
        for kind in ANOMALY_TYPES:
            tests += 1
            case = ET.SubElement(suite, "testcase", classname=name, name=kind, time="0")
            n = s["anomaly_counts"][kind]
            if n and kind in s["fatal"]:
                fails += 1
                f = ET.SubElement(case, "failure", type=kind, message=f"{n} {kind}")
                f.text = _instances_text(s, kind)
            elif n:
                out = ET.SubElement(case, "system-out")
                out.text = f"{n} {kind}, reported, not fatal in this run\n" + _instances_text(s, kind)
        tests += 1
        case = ET.SubElement(suite, "testcase", classname=name, name="final-reads", time="0")
        if not s["final_reads"]["complete"]:
            skips += 1
            ET.SubElement(case, "skipped", message="final reads did not complete: verdict unknown")
        suite.set("tests", str(tests))
        suite.set("failures", str(fails))
        suite.set("errors", "0")
        suite.set("skipped", str(skips))
        t_tests, t_fail, t_skip = t_tests + tests, t_fail + fails, t_skip + skips
    root.set("tests", str(t_tests))
    root.set("failures", str(t_fail))
    root.set("errors", "0")
    root.set("skipped", str(t_skip))
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(path: Path, summaries: list[dict]) -> Path:
    path = Path(path)
    build(summaries).write(path, encoding="utf-8", xml_declaration=True)
    return path

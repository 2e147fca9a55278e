"""hwlab report renderers: a terminal matrix (rich), JUnit XML, and one self-contained HTML
file. Each takes a `LabReport`; none of them changes it."""

from __future__ import annotations

import html
import xml.etree.ElementTree as ET
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tools.hwlab.results import LabReport

SYMBOL = {"passed": "pass", "failed": "FAIL", "error": "ERROR", "skipped": "skip"}
STYLE = {"passed": "green", "failed": "bold red", "error": "bold red", "skipped": "yellow"}


def summary_line(message: str) -> str:
    """The line that says what went wrong: pytest's first "E   " line (the exception),
    else the last non-empty line."""
    lines = [ln for ln in message.strip().splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("E   "):
            return ln[1:].strip()
    return lines[-1].strip() if lines else ""


def terminal(report: LabReport, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title="hwlab: tests x devices", show_lines=False)
    table.add_column("test", overflow="fold")
    for key in report.device_keys():
        table.add_column(escape(key), justify="center", overflow="fold")
    for test in report.test_names():
        row = [escape(test)]
        for key in report.device_keys():
            r = report.cell(test, key)
            row.append(f"[{STYLE[r.outcome]}]{SYMBOL[r.outcome]}[/]" if r else "-")
        table.add_row(*row)
    console.print(table)
    c = report.counts()
    console.print(
        f"{c['passed']} passed, {c['failed'] + c['error']} failed, {c['skipped']} skipped"
    )
    for r in report.results:
        if r.outcome in ("failed", "error"):
            console.print(
                f"[red]{SYMBOL[r.outcome]}[/] {escape(r.test)} on {escape(r.device)}: "
                f"{escape(summary_line(r.message))}"
            )
    reasons: dict[tuple[str, str], int] = {}
    for r in report.results:
        if r.outcome == "skipped":
            key = (r.device, summary_line(r.message))
            reasons[key] = reasons.get(key, 0) + 1
    if reasons:
        console.print("[bold]skipped[/]")
        for (device, why), n in reasons.items():
            console.print(f"  [yellow]{n} on {escape(device)}[/]: {escape(why)}")
    figures = [r for r in report.results if r.outcome == "passed" and r.message]
    if figures:
        console.print("[bold]figures[/]")
        for r in figures:
            text = "; ".join(r.message.splitlines())
            console.print(f"  {escape(r.test)} on {escape(r.device)}: {escape(text)}")


def junit_xml(report: LabReport, path: str | Path) -> None:
    """One <testsuite> per device, one <testcase> per test, as CI systems read them."""
    suites = ET.Element("testsuites", name="hwlab")
    for key in report.device_keys():
        cells = [r for r in report.results if r.device == key]
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=key,
            tests=str(len(cells)),
            failures=str(sum(r.outcome == "failed" for r in cells)),
            errors=str(sum(r.outcome == "error" for r in cells)),
            skipped=str(sum(r.outcome == "skipped" for r in cells)),
            time=f"{sum(r.duration_s for r in cells):.3f}",
        )
        for r in cells:
            case = ET.SubElement(
                suite, "testcase", classname=key, name=r.test, time=f"{r.duration_s:.3f}"
            )
            if r.outcome in ("failed", "error"):
                tag = "failure" if r.outcome == "failed" else "error"
                first = summary_line(r.message) or r.outcome
                ET.SubElement(case, tag, message=first[:500]).text = r.message
            elif r.outcome == "skipped":
                ET.SubElement(case, "skipped", message=r.message[:500])
            elif r.message:  # a passing perf test's figures
                ET.SubElement(case, "system-out").text = r.message
    ET.indent(suites)
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:1em 0}
th,td{border:1px solid #ccc;padding:.3em .6em;font-size:.9em}
th{background:#f3f3f3;position:sticky;top:0}
td.passed{background:#dff5df}td.failed,td.error{background:#f9d6d6;font-weight:bold}
td.skipped{background:#fff6d0}
pre{white-space:pre-wrap;background:#f8f8f8;padding:.5em;border:1px solid #ddd}
"""


def html_report(report: LabReport, path: str | Path) -> None:
    """One self-contained HTML file: machines, devices, the matrix, and per-test details."""
    e = html.escape
    keys = report.device_keys()
    c = report.counts()
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>hwlab report</title>",
        f"<style>{_CSS}</style></head><body><h1>hwlab report</h1>",
        f"<p>{c['passed']} passed, {c['failed'] + c['error']} failed, {c['skipped']} skipped</p>",
        "<h2>Machines</h2><table><tr><th>name</th><th>platform</th><th>python</th><th>time</th></tr>",
    ]
    for m in report.machines:
        parts.append(
            "<tr>"
            + "".join(
                f"<td>{e(str(m.get(k, '')))}</td>" for k in ("name", "platform", "python", "time")
            )
            + "</tr>"
        )
    parts.append(
        "</table><h2>Devices</h2><table><tr><th>key</th><th>backend</th><th>name</th>"
        "<th>target</th><th>available</th><th>paths</th><th>reason</th></tr>"
    )
    for d in report.devices:
        paths = ", ".join(f"{k}: {'yes' if v else 'no'}" for k, v in d.get("paths", {}).items())
        parts.append(
            f"<tr><td>{e(d['key'])}</td><td>{e(str(d.get('backend', '')))}</td>"
            f"<td>{e(str(d.get('name', '')))}</td><td>{e(str(d.get('target', '')))}</td>"
            f"<td>{'yes' if d.get('available') else 'no'}</td><td>{e(paths)}</td>"
            f"<td>{e(str(d.get('reason', '')))}</td></tr>"
        )
    parts.append("</table><h2>Matrix</h2><table><tr><th>test</th>")
    parts += [f"<th>{e(k)}</th>" for k in keys]
    parts.append("</tr>")
    for test in report.test_names():
        parts.append(f"<tr><td>{e(test)}</td>")
        for k in keys:
            r = report.cell(test, k)
            if r is None:
                parts.append("<td>-</td>")
            else:
                anchor = f"r{report.results.index(r)}"
                parts.append(
                    f"<td class='{r.outcome}'><a href='#{anchor}'>{SYMBOL[r.outcome]}</a></td>"
                )
        parts.append("</tr>")
    parts.append("</table><h2>Details</h2>")
    for i, r in enumerate(report.results):
        if r.outcome == "passed" and not r.message:
            continue
        parts.append(
            f"<details id='r{i}' open><summary>{SYMBOL[r.outcome]}: {e(r.test)} on {e(r.device)}"
            f" ({r.duration_s:.3f} s)</summary><pre>{e(r.message)}</pre></details>"
        )
    parts.append("</body></html>\n")
    Path(path).write_text("".join(parts), encoding="utf-8")

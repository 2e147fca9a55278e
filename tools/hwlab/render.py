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
            reason = (r.device, summary_line(r.message))
            reasons[reason] = reasons.get(reason, 0) + 1
    if reasons:
        console.print("[bold]skipped[/]")
        for (device, why), n in reasons.items():
            console.print(f"  [yellow]{n} on {escape(device)}[/]: {escape(why)}")
    figures = [r for r in report.results if r.outcome == "passed" and r.message]
    if figures:
        console.print("[bold]figures[/]")
        for r in figures:
            lines = r.message.splitlines()
            # a level check: what was measured and the verdict (its source is in JSON/HTML)
            text = "; ".join([lines[0], lines[-1]] if r.figures and len(lines) > 2 else lines)
            console.print(f"  {escape(r.test)} on {escape(r.device)}: {escape(text)}")


def fleet_terminal(report: LabReport, console: Console | None = None) -> None:
    """A fleet run's nodes, what is missing, and the figures off the fleet's median."""
    info = report.extra.get("fleet")
    if not info:
        return
    console = console or Console()
    console.print(f"[bold]fleet[/]: partition {escape(info['partition'])}, level "
                  f"{info['level']}: {info['reported']} of {info['requested_nodes']} job(s) "
                  f"reported, from node(s) {', '.join(info['nodes_reported']) or 'none'}")
    if info["missing"]:
        console.print(f"[red]missing[/]: {info['missing']} job(s) sent no report (their rows "
                      "say why)")
    if info["outliers"]:
        table = Table(title=f"outliers: worse than the fleet median by more than "
                      f"{info['tolerance'] * 100:.0f}%")
        for col in ("check", "device", "metric", "figure", "median", "ratio"):
            table.add_column(col, overflow="fold")
        for o in info["outliers"]:
            table.add_row(escape(o["test"]), escape(o["device"]), o["metric"],
                          f"{o['value']:.4g}", f"{o['median']:.4g}", f"{o['ratio']:.2f}")
        console.print(table)
    else:
        console.print("no outliers against the fleet median")


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


def _fleet_html(report: LabReport) -> list[str]:
    info = report.extra.get("fleet")
    if not info:
        return []
    e = html.escape
    parts = [f"<h2>Fleet</h2><p>partition {e(info['partition'])}, level {info['level']}: "
             f"{info['reported']} of {info['requested_nodes']} job(s) reported, from node(s) "
             f"{e(', '.join(info['nodes_reported']) or 'none')}"
             f"{'; ' + str(info['missing']) + ' missing' if info['missing'] else ''}</p>"]
    if info["outliers"]:
        parts.append("<table><tr><th>check</th><th>device</th><th>metric</th><th>figure</th>"
                     "<th>fleet median</th><th>ratio</th></tr>")
        for o in info["outliers"]:
            parts.append(f"<tr><td>{e(o['test'])}</td><td>{e(o['device'])}</td>"
                         f"<td>{e(o['metric'])}</td><td class='failed'>{o['value']:.4g}</td>"
                         f"<td>{o['median']:.4g}</td><td>{o['ratio']:.2f}</td></tr>")
        parts.append("</table>")
    return parts


def _heat(value: float, top: float) -> str:
    """A cell colour from white (0) to deep green (the table's best figure)."""
    share = 0.0 if top <= 0 else max(0.0, min(1.0, value / top))
    low, mid = int(255 - 180 * share), int(255 - 60 * share)
    return f"background:rgb({low},{mid},{low})"


def _matrices(report: LabReport):
    """(device key, matrix dict) of every transfer matrix a level check recorded."""
    for r in report.results:
        m = (r.figures or {}).get("matrix")
        if m:
            yield r.device, m


def matrix_tables(m: dict) -> list[tuple[str, list[list[str]], float]]:
    """Per executor: (executor, rows of [source, GB/s per destination], best figure)."""
    cells = {(c["src"], c["dst"], c["executor"]): c for c in m["cells"]}
    out = []
    for executor in m["executors"]:
        best = max((c.get("gbps", 0.0) for c in m["cells"] if c["executor"] == executor),
                   default=0.0)
        rows = []
        for src in m["endpoints"]:
            row = [src]
            for dst in m["endpoints"]:
                c = cells.get((src, dst, executor))
                row.append("-" if c is None else "error" if "error" in c
                           else f"{c['gbps']:.3g}")
            rows.append(row)
        out.append((executor, rows, best))
    return out


def matrix_terminal(report: LabReport, console: Console | None = None) -> None:
    console = console or Console()
    for device, m in _matrices(report):
        for executor, rows, _ in matrix_tables(m):
            table = Table(title=f"transfer matrix, {escape(device)}, {executor} (GB/s, "
                          f"{m['bytes_text']} each, every transfer validated)")
            table.add_column("source \\ destination")
            for dst in m["endpoints"]:
                table.add_column(dst, justify="right")
            for row in rows:
                table.add_row(*row)
            console.print(table)


def _matrix_html(report: LabReport) -> list[str]:
    """Every transfer matrix a level check recorded: per executor, a bandwidth table
    coloured as a heat map (white = 0, deep green = the table's best figure)."""
    e = html.escape
    parts: list[str] = []
    for device, m in _matrices(report):
        parts.append(f"<h2>Transfer matrix: {e(device)}</h2><p>GB/s, {e(m['bytes_text'])} per "
                     "transfer, every transfer validated byte for byte</p>")
        for executor, rows, best in matrix_tables(m):
            parts.append(f"<h3>{e(executor)}</h3><table class='heat'><tr>"
                         "<th>source \\ destination</th>")
            parts += [f"<th>{e(d)}</th>" for d in m["endpoints"]]
            parts.append("</tr>")
            for row in rows:
                parts.append(f"<tr><th>{e(row[0])}</th>")
                for text in row[1:]:
                    if text in ("-", "error"):
                        cls = " class='failed'" if text == "error" else ""
                        parts.append(f"<td{cls}>{text}</td>")
                    else:
                        parts.append(f"<td style='{_heat(float(text), best)}'>{text}</td>")
                parts.append("</tr>")
            parts.append("</table>")
    return parts


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
    parts.append("</table>")
    parts += _fleet_html(report)
    parts += _matrix_html(report)
    parts.append("<h2>Details</h2>")
    for i, r in enumerate(report.results):
        if r.outcome == "passed" and not r.message:
            continue
        parts.append(
            f"<details id='r{i}' open><summary>{SYMBOL[r.outcome]}: {e(r.test)} on {e(r.device)}"
            f" ({r.duration_s:.3f} s)</summary><pre>{e(r.message)}</pre></details>"
        )
    parts.append("</body></html>\n")
    Path(path).write_text("".join(parts), encoding="utf-8")

"""The gradebook as files: a CSV (one row per learner, one column per exercise), one
self-contained HTML page (no scripts, no external files) an instructor opens in a browser,
and one feedback page per learner (Markdown: each exercise's question, verdict and hint).
Everything a learner wrote (names, hints quoting their errors) is escaped."""
from __future__ import annotations

import html
import re
from pathlib import Path

from ..safeio import write_text_atomic
from ..sources import write_csv as _write_rows

COLOURS = {"pass": "#2e7d32", "fail": "#c62828", "borrowed": "#0d47a1",
           "not attempted": "#bdbdbd", "error": "#6a1b9a", "timeout": "#ef6c00"}
LABELS = {"pass": "通过", "fail": "未通过", "borrowed": "借用了答案", "not attempted": "未作答",
          "error": "出错", "timeout": "超时"}


def csv_rows(book) -> list[list[str]]:
    header = ["learner", "passed", "total", "chapters_complete", *book.exercises]
    rows = [header]
    for who in book.learners:
        rows.append([who, str(book.passed(who)), str(len(book.exercises)),
                     " ".join(book.chapters_complete(who)),
                     *(book.results[who][ex].verdict for ex in book.exercises)])
    return rows


def write_csv(book, path) -> Path:
    header, *rows = csv_rows(book)
    return _write_rows(path, rows, header=header)


_STYLE = """
body{font-family:"Noto Sans CJK SC","Noto Sans SC","Microsoft YaHei",sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;font-size:12px}th,td{border:1px solid #ddd;padding:2px 4px}
th.ex{writing-mode:vertical-rl;white-space:nowrap;font-weight:normal}
td.v{width:16px;height:16px;padding:0}td.who{white-space:nowrap;font-weight:bold}
.legend span{display:inline-block;padding:2px 8px;margin-right:6px;color:#fff;border-radius:3px}
td.n{white-space:nowrap}
.bar{background:#eee;width:120px;height:12px;display:inline-block;vertical-align:middle}
.bar i{display:block;height:100%;background:#2e7d32}
.chapters{display:grid;grid-template-columns:repeat(4,max-content);gap:4px 28px;font-size:13px}
"""


def _cell(result, learner: str, exercise: str) -> str:
    tip = f"{learner} · {exercise} · {LABELS[result.verdict]}" + (
        f"：{result.hint}" if result.hint else "")
    return (f'<td class="v" data-verdict="{html.escape(result.verdict)}" '
            f'style="background:{COLOURS[result.verdict]}" title="{html.escape(tip)}"></td>')


def _bar(done: int, total: int) -> str:
    width = 100 * done / total if total else 0
    return f'<span class="bar"><i style="width:{width:.0f}%"></i></span> {done}/{total}'


def _chapter_bars(book) -> str:
    rows = []
    for ch, names in book.chapters.items():
        done = sum(book.passed(who, ch) for who in book.learners)
        total = len(names) * len(book.learners)
        rows.append(f'<div class="chapter">第 {html.escape(ch)} 章 {_bar(done, total)}</div>')
    return '<div class="chapters">' + "".join(rows) + "</div>"


def _table(book) -> str:
    esc = html.escape
    head = "".join(f'<th colspan="{len(n)}">{esc(ch)}</th>' for ch, n in book.chapters.items())
    names = "".join(f'<th class="ex">{esc(ex)}</th>' for ex in book.exercises)
    rows = []
    for who in book.learners:
        cells = "".join(_cell(book.results[who][ex], who, ex) for ex in book.exercises)
        done = book.chapters_complete(who)
        rows.append(f'<tr class="learner"><td class="who">{esc(who)}</td>'
                    f'<td class="n">{_bar(book.passed(who), len(book.exercises))}</td>'
                    f'<td class="n">{len(done)}/{len(book.chapters)}</td>{cells}</tr>')
    return (f'<table class="grades"><tr><th rowspan="2">学员</th><th rowspan="2">通过的练习</th>'
            f'<th rowspan="2">完成的章节</th>{head}</tr><tr>{names}</tr>{"".join(rows)}</table>')


def render_html(book, title: str = "成绩册") -> str:
    legend = "".join(f'<span style="background:{c}">{LABELS[v]}（{v}）</span>'
                     for v, c in COLOURS.items())
    return (f'<!DOCTYPE html><html lang="zh-CN"><head><meta charset="utf-8">'
            f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><p>{len(book.learners)} 位学员，"
            f"{len(book.exercises)} 个练习。鼠标停在格子上可以看到提示。</p>"
            f'<p class="legend">{legend}</p><h2>各章完成情况（全班）</h2>{_chapter_bars(book)}'
            f"<h2>每位学员</h2>{_table(book)}</body></html>\n")


def write_html(book, path, title: str = "成绩册") -> Path:
    return write_text_atomic(path, render_html(book, title))


# --------------------------------------------------------------------------- feedback
def _md(text: str) -> str:
    """Learner-controlled text made inert in Markdown (no HTML, no layout)."""
    return html.escape(" ".join(str(text).split()), quote=False).replace("`", "'")


def feedback_markdown(book, learner: str, tasks: dict) -> str:
    lines = [f"# 练习反馈：{_md(learner)}", "",
             f"通过 {book.passed(learner)}/{len(book.exercises)} 个练习；完成的章节 "
             f"{len(book.chapters_complete(learner))}/{len(book.chapters)}。", ""]
    for ch, names in book.chapters.items():
        lines += [f"## 第 {ch} 章（通过 {book.passed(learner, ch)}/{len(names)}）", ""]
        for ex in names:
            result = book.results[learner][ex]
            task = f"（{_md(tasks[ex])}）" if tasks.get(ex) else ""
            hint = f" — 提示：{_md(result.hint)}" if result.hint else ""
            lines.append(f"- **{ex}**{task}：{LABELS[result.verdict]}{hint}")
        lines.append("")
    return "\n".join(lines)


def feedback_name(learner: str, taken: set) -> str:
    """A file name for ``learner`` that is safe anywhere and unique among ``taken``."""
    stem = re.sub(r"[^\w.-]+", "_", learner).strip("._") or "learner"
    name, n = f"{stem}.md", 2
    while name.lower() in taken:
        name, n = f"{stem}-{n}.md", n + 1
    taken.add(name.lower())
    return name


def write_feedback(book, folder) -> dict[str, Path]:
    """One Markdown page per learner in ``folder``: {learner: path}."""
    from ..check import all_exercises
    tasks = {name: ex.task for name, ex in all_exercises().items()}
    folder, taken, paths = Path(folder), set(), {}
    for who in book.learners:
        paths[who] = write_text_atomic(folder / feedback_name(who, taken),
                                       feedback_markdown(book, who, tasks))
    return paths

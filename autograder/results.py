"""Reading an executed notebook's graded cells: one row per exercise."""
from __future__ import annotations

from dataclasses import dataclass, field

from autograder.api import RESULT_MIME, points_text


@dataclass
class CellResult:
    exercise: str
    score: float
    points: float
    status: str  # passed | partial | failed | not implemented | error
    reason: str
    lines: list = field(default_factory=list)  # what the check cell printed, for a learner's command line
    through: list = field(default_factory=list)  # earlier exercises replaced by the reference's answers (autograder.checks.charging)


def _grade(cell):
    """nbgrader's own rule (error or stderr -> 0; a number -> partial; else full)."""
    from nbgrader.utils import determine_grade

    return determine_grade(cell)


def _wrote_stderr(cell):
    return any(o.get("output_type") == "stream" and o.get("name") == "stderr" for o in cell.get("outputs", []))


def notebook_results(nb):
    """A CellResult for every graded test cell of an executed notebook, in order."""
    rows = []
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        published = next((o["data"][RESULT_MIME] for o in cell.get("outputs", []) if RESULT_MIME in o.get("data", {})), None)
        score, points = (published["score"], published["points"]) if published and not _wrote_stderr(cell) else _grade(cell)
        error = next((o for o in cell.get("outputs", []) if o.get("output_type") == "error"), None)
        exercise = published["exercise"] if published else meta.get("grade_id", "?").removeprefix("check_")
        if published and published["status"] == "not implemented":
            status, reason = published["status"], published["reason"]
        elif score == points:
            status, reason = "passed", ""
        elif published:
            status, reason = ("partial" if score > 0 else "failed"), published["reason"]
        elif error is not None:
            status, reason = "error", f"{error.get('ename')}: {error.get('evalue', '')}".strip()
        else:
            status, reason = "failed", "the cell wrote to stderr or produced no result"
        rows.append(CellResult(exercise, float(score), float(points), status, _one_line(reason), (published or {}).get("lines", []),
                               [str(d) for d in (published or {}).get("through", [])]))
    return rows


def _one_line(text, limit=400):
    """text on one line, at most about `limit` characters; a long one is cut before its "Likely mistake:", which
    is kept whole (the name of the mistake is what a reason is for)."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    head, found, mistake = text.partition(" Likely mistake: ")
    if found and len(mistake) < limit // 2:
        return head[: limit - len(found) - len(mistake)] + "…" + found + mistake
    return text[:limit] + "…"


def table(rows, title=None):
    """A plain-text table of CellResults, its columns aligned whatever the points (fractions of parts to two
    decimals: autograder.api.points_text)."""
    width = max([len(r.exercise) for r in rows] + [8])
    total, points = sum(r.score for r in rows), sum(r.points for r in rows)
    scores = [points_text(r.score) for r in rows] + [points_text(total)]
    outof = [points_text(r.points) for r in rows] + [points_text(points)]
    left, right = max(map(len, scores)), max(map(len, outof))
    column = max(left + 3 + right, len("points"))
    left = column - 3 - right  # a wider header widens the scores' side

    def pts(score, of):
        return f"{score:>{left}} / {of:<{right}}"

    lines = [title] if title else []
    lines.append(f"{'exercise':<{width}}  {'points':^{column}}  {'status':<15}  reason")
    for r, score, of in zip(rows, scores, outof):
        lines.append(f"{r.exercise:<{width}}  {pts(score, of)}  {r.status:<15}  {r.reason}".rstrip())
    lines.append(f"{'total':<{width}}  {pts(scores[-1], outof[-1])}".rstrip())
    lines += [charged_once_line(r) for r in rows if r.through]
    return "\n".join(lines)


def charged_once_line(row):
    """What the table says of an exercise checked on the course's versions of the earlier ones it uses."""
    them = ", ".join(row.through)
    return (f"{row.exercise}: checked on the course's {them}, since yours {'fails its' if len(row.through) == 1 else 'fail their'} "
            f"check: a mistake is charged once")

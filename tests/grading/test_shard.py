"""Grading a class on several nodes: `grade --shard K/N` on each, then `merge` (autograder/grading/shard.py).

The split is checked on its own; then one small class is graded whole and as two shards in separate course
folders, the shards are merged into a third, and the merged gradebook and grades.csv must be the whole run's."""
import html
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from nbgrader.api import Gradebook

from autograder.course import CourseError, sqlite_url
from autograder.grading.grade import Grader, read_grades, read_problems
from autograder.grading.shard import Shard, merge, number, parse
from conftest import ROOT, clone, in_clone

NAME = "05_self_attention"
IDS = [f"s{i:03d}" for i in range(200)] + ["ada", "A.b-c_9", "x" * 64]


# ---------------------------------------------------------------- the split
def test_the_split_is_sha256_of_the_id_the_same_in_every_process():
    assert {s: number(s, 2) for s in ("ada", "cy", "dan", "eve")} == {"ada": 1, "cy": 1, "dan": 2, "eve": 2}
    code = "from autograder.grading.shard import number; print([number(s, n) for s in %r for n in (1, 2, 3, 4)])" % IDS
    runs = {subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                           env=os.environ | {"PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert runs == {str([number(s, n) for s in IDS for n in (1, 2, 3, 4)]) + "\n"}


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_the_shards_cover_every_student_once(n):
    shards = [Shard(k, n) for k in range(1, n + 1)]
    for student in IDS + [b"[a]da", "caf\udce9"]:  # folder names that are no id are split too, by their bytes
        assert sum(s.has(student) for s in shards) == 1
    assert all(sum(s.has(student) for student in IDS) > len(IDS) / n / 2 for s in shards)  # and none is starved


@pytest.mark.parametrize("text", ["0/3", "4/3", "a/b", "3", "", "1/0", "-1/3", "1/3/5", " 1/3", "1.0/3", "1/" + "9" * 99])
def test_bad_shards_are_refused_naming_the_form(text):
    with pytest.raises(CourseError, match="expected K/N"):
        parse(text)


def test_grade_refuses_a_bad_shard_before_grading_anything(tmp_path, capsys):
    from autograder.__main__ import main

    (tmp_path / "submitted" / "ada" / NAME).mkdir(parents=True)
    assert main(["grade", str(tmp_path), "--shard", "4/3"]) == 2
    assert "expected K/N" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["submitted"]


def test_a_shard_grades_only_its_students(tmp_path):
    for student in ("ada", "cy", "dan", "eve", "[a]da"):
        (tmp_path / "submitted" / student / NAME).mkdir(parents=True)
    seen = []
    for k in (1, 2):
        grader = Grader(tmp_path, root=ROOT, log=lambda *a: None, shard=Shard(k, 2))
        subs, _ = grader.submissions()
        seen.append(sorted(s for s, _ in subs) + sorted(s for s, _ in grader.unnamed))
    assert sorted(seen[0] + seen[1]) == sorted(["'[a]da'", "ada", "cy", "dan", "eve"])
    assert seen[0][:2] == ["ada", "cy"] and seen[1][:2] == ["dan", "eve"]


# ---------------------------------------------------------------- merge refusals that need no grading
def test_merge_refuses_what_is_no_graded_shard(tmp_path):
    course, plain, linked = tmp_path / "course", tmp_path / "plain", tmp_path / "linked"
    for folder in (course, plain, linked):
        (folder / "submitted").mkdir(parents=True)
    (linked / ".autograder").mkdir()
    (linked / ".autograder" / "manifest.json").write_text("{}")
    (linked / "gradebook.db").symlink_to(ROOT / "nbgrader_config.py")  # a link is not read
    for shards, says in (([tmp_path / "missing"], "is not a folder"), ([plain], "is not a graded course"),
                         ([linked], "is not a graded course"), ([course], "none may be COURSE"),
                         ([plain, plain], "named once")):
        with pytest.raises(CourseError, match=says):
            merge(course, shards, root=ROOT, log=lambda *a: None)
    assert sorted(p.name for p in course.iterdir()) == ["submitted"]


# ---------------------------------------------------------------- a class graded whole and in two shards
def cli(repo, *args):
    done = in_clone(repo, *args)
    assert done.returncode == 0, f"{args}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def new_course(path):
    """ada (shard 1 of 2) complete, eve (2) with two mistakes, dan (2) a renamed notebook: not graded, 0."""
    examples = ROOT / "examples" / "submitted"
    for student, example, filename in (("ada", "ada_complete", NAME), ("eve", "cy_two_mistakes", NAME), ("dan", "ada_complete", "my_work")):
        (path / "submitted" / student / NAME).mkdir(parents=True)
        shutil.copy(examples / example / NAME / f"{NAME}.ipynb", path / "submitted" / student / NAME / f"{filename}.ipynb")
    return path


def scores(course):
    """{(student, assignment, notebook): every grade's and comment's values}, read from the course's gradebook."""
    with Gradebook(sqlite_url(course / "gradebook.db")) as gb:
        return {(sub.student.id, a.name, nb.name): (nb.score, sorted((g.name, g.auto_score, g.manual_score, g.extra_credit) for g in nb.grades),
                                                    sorted((c.name, c.auto_comment, c.manual_comment) for c in nb.comments))
                for a in gb.assignments for sub in a.submissions for nb in sub.notebooks}


def files(course, kind):
    return sorted(str(p.relative_to(course / kind)) for p in (course / kind).rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    top, took = tmp_path_factory.mktemp("shards"), {}
    repo = clone(top / "repo")
    whole, one, two, merged = (new_course(top / name) for name in ("whole", "one", "two", "merged"))
    for name, args in (("whole", [whole]), ("one", [one, "--shard", "1/2"]), ("two", [two, "--shard", "2/2"])):
        start = time.monotonic()
        cli(repo, "grade", *args, "--jobs", "1", "--no-progress")
        took[name] = time.monotonic() - start
    # a node that was compromised plants links in its shard: merge copies none of them
    (two / "feedback" / "eve" / NAME / "answers.html").symlink_to(ROOT / "solutions" / NAME / f"{NAME}.ipynb")
    (two / "autograded" / "eve" / NAME / "solutions").symlink_to(ROOT / "solutions", target_is_directory=True)
    start = time.monotonic()
    out = cli(repo, "merge", merged, one, two)
    took["merge"] = time.monotonic() - start
    print(f"\ngrade whole {took['whole']:.1f} s, shard 1/2 {took['one']:.1f} s, shard 2/2 {took['two']:.1f} s, merge {took['merge']:.1f} s")
    return {"repo": repo, "whole": whole, "one": one, "two": two, "merged": merged, "out": out, "first": scores(merged),
            "grades": read_grades(merged), "problems": read_problems(merged), "files": {k: files(merged, k) for k in ("autograded", "feedback")}}


def rows(table):
    return sorted(tuple(sorted(row.items())) for row in table)


@pytest.mark.slow
def test_the_merged_gradebook_is_the_whole_runs(graded):
    assert graded["first"] == scores(graded["whole"])
    assert {s for s, _, _ in graded["first"]} == {"ada", "eve"}  # dan's could not be graded: no submission, 0
    assert rows(graded["grades"]) == rows(read_grades(graded["whole"])) and len(graded["grades"]) == 3
    assert rows(graded["problems"]) == rows(read_problems(graded["whole"])) and [p["student_id"] for p in graded["problems"]] == ["dan"]
    assert "merged 3 student(s) from 2 shard(s)" in graded["out"]


@pytest.mark.slow
def test_each_shard_graded_only_its_students_and_merge_took_their_files(graded):
    assert {g["student_id"] for g in read_grades(graded["one"])} == {"ada"}
    assert {g["student_id"] for g in read_grades(graded["two"])} == {"dan", "eve"}
    for kind in ("autograded", "feedback"):
        assert graded["files"][kind] == files(graded["whole"], kind)


@pytest.mark.slow
def test_merge_follows_no_link_out_of_a_shard(graded):
    merged = graded["merged"]
    assert not (merged / "feedback" / "eve" / NAME / "answers.html").exists()
    assert not (merged / "autograded" / "eve" / NAME / "solutions").exists()
    assert not [p for p in merged.rglob("*") if p.is_symlink()]


@pytest.mark.slow
def test_a_manual_grade_in_the_course_survives_a_merge_and_its_feedback_shows_it(graded):
    merged = graded["merged"]
    with Gradebook(sqlite_url(merged / "gradebook.db")) as gb:
        grade = next(g for g in gb.find_submission_notebook(NAME, NAME, "eve").grades if g.auto_score < g.max_score)
        name, auto, full = grade.name, grade.auto_score, grade.max_score
        grade.manual_score = full
        gb.db.commit()
    merge(merged, [graded["one"], graded["two"]], root=graded["repo"], log=lambda *a: None)  # the shards again, as after a regrade
    after = scores(merged)
    total = graded["first"][("eve", NAME, NAME)][0] + full - auto
    assert after[("eve", NAME, NAME)][0] == total and (name, auto, full, None) in after[("eve", NAME, NAME)][1]
    assert float(next(g for g in read_grades(merged) if g["student_id"] == "eve")["score"]) == total
    page = html.unescape((merged / "feedback" / "eve" / NAME / f"{NAME}.html").read_text())
    assert float(re.search(r"\(Score: ([0-9.]+) / ", page).group(1)) == total  # written again by nbgrader


@pytest.mark.slow
def test_a_student_in_two_shards_is_refused_unless_it_is_the_same_submission(graded, tmp_path):
    merged, one = graded["merged"], graded["one"]
    same, forged = tmp_path / "same", tmp_path / "forged"
    shutil.copytree(one, same, symlinks=True)
    shutil.copytree(one, forged, symlinks=True)
    state = json.loads((forged / ".autograder" / "manifest.json").read_text())
    state["graded"][f"ada/{NAME}"] = "another submission"
    (forged / ".autograder" / "manifest.json").write_text(json.dumps(state))
    before = {p: (merged / p).read_bytes() for p in ("gradebook.db", "grades.csv", ".autograder/manifest.json")}
    with pytest.raises(CourseError, match=f"ada is in both {one} .*and {forged}"):
        merge(merged, [one, forged], root=graded["repo"], log=lambda *a: None)
    assert before == {p: (merged / p).read_bytes() for p in before}  # nothing written
    assert merge(merged, [one, same], root=graded["repo"], log=lambda *a: None) == {"ada": one}


@pytest.mark.slow
def test_grade_in_the_merged_course_then_regrades_nothing(graded):
    merged = graded["merged"]
    before = read_grades(merged)
    assert "graded 0, unchanged 2, failed 1" in cli(graded["repo"], "grade", merged, "--jobs", "1", "--no-progress")
    assert read_grades(merged) == before


@pytest.mark.slow
def test_merge_takes_no_name_from_a_shard_that_is_no_id(graded, tmp_path):
    merged, hostile = graded["merged"], tmp_path / "hostile"
    shutil.copytree(graded["one"], hostile, symlinks=True)
    state = json.loads((hostile / ".autograder" / "manifest.json").read_text())
    state["problems"] |= {f"../evil/{NAME}": "x", "ada/../../evil": "x", "[a]da/x": "x"}
    (hostile / ".autograder" / "manifest.json").write_text(json.dumps(state))
    said = []
    assert merge(merged, [hostile], root=graded["repo"], log=said.append) == {"ada": hostile}
    assert not list(merged.rglob("*evil*")) and not (merged.parent / "evil").exists()
    assert any("id '..' is not graded" in line for line in said) and any("'[a]da' is not graded" in line for line in said), said


@pytest.mark.slow
def test_a_shard_with_none_of_the_class_grades_nothing_and_merges_nothing(tmp_path):
    empty, course = new_course(tmp_path / "empty"), tmp_path / "course"
    (course / "submitted").mkdir(parents=True)
    assert not any(Shard(1, 3).has(student) for student in ("ada", "eve", "dan"))
    assert Grader(empty, root=ROOT, log=lambda *a: None, shard=Shard(1, 3)).run(progress=False) == ([], [], [])
    said = []
    assert merge(course, [empty], root=ROOT, log=said.append) == {}
    assert said == ["not merged (yet): shard 2/3, 3/3"] and read_grades(course) == []

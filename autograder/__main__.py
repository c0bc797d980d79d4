"""python -m autograder {check, progress, release, grade, merge, demo, new-exercise}"""
import argparse
import faulthandler
import importlib.util
import signal
import sys

from autograder.check_notebook import check
from autograder.course import CourseError, find_root
from autograder.progress import progress

# The student distribution (autograder.release.student_dist) ships this file without the instructor's commands.
INSTRUCTOR = importlib.util.find_spec("autograder.release") is not None

COMMANDS = """commands:
  python -m autograder check NOTEBOOK...             grade your notebook(s) locally (students)
  python -m autograder check --save NOTEBOOK...      and keep the results in their check cells (for `yours`, `progress`)
  python -m autograder progress [FOLDER]             what you have done across the course, from your saved notebooks
""" + ("""\
  python -m autograder release                       generate notebooks/ from solutions/ (instructors)
  python -m autograder release --student-dist DIR    the notebooks and their checks for a class, without solutions
  python -m autograder grade COURSE [--jobs N]       autograde COURSE/submitted/ with nbgrader, sandboxed (instructors)
  python -m autograder grade COURSE --shard K/N      grade only shard K of N of the class, on one of N nodes
  python -m autograder merge COURSE SHARD...         take graded shards' results into COURSE's gradebook and grades.csv
  python -m autograder demo                          the instructor pipeline on example submissions
  python -m autograder new-exercise NB NAME --after EX
                                                     add exercise NAME, its reference written first (CONTRIBUTING.md)
  python -m autograder new-exercise NB NAME --check  what an exercise still lacks: hidden cases, mistakes, hints
""" if INSTRUCTOR else "")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m autograder", description="Checks and grading for the course.",
                                     epilog=COMMANDS, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("check", help="run notebooks in a fresh kernel and grade them")
    p.add_argument("notebooks", nargs="+", metavar="NOTEBOOK")
    p.add_argument("--junitxml", metavar="PATH", help="also write a JUnit XML report")
    p.add_argument("--timeout", type=int, default=300, help="seconds allowed per cell (default 300)")
    p.add_argument("--save", action="store_true", help="also write the results into each notebook's check cells (as "
                   "running them in Jupyter and saving would), for the later notebooks' `yours` and for `progress`; "
                   "a notebook saved again while it ran is left as it is")

    p = sub.add_parser("progress", help="a table of every notebook: exercises passed, points, what is next "
                       "(read from the saved notebooks; nothing is run)")
    p.add_argument("folder", nargs="?", default=".", metavar="FOLDER",
                   help="where your notebooks are (default: this folder; searched recursively)")
    if INSTRUCTOR:
        add_instructor_commands(sub)

    args = parser.parse_args(argv)
    try:
        return run(args)
    except CourseError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def add_instructor_commands(sub):
    p = sub.add_parser("release", help="generate notebooks/ (and the demo submissions) from solutions/")
    p.add_argument("assignments", nargs="*", help="only these assignments (default: all)")
    p.add_argument("--dest", help="write the student notebooks here instead of notebooks/")
    p.add_argument("--student-dist", metavar="DIR", help="instead, write what a class gets into DIR: the notebooks and "
                   "their checks, without solutions, reference code or hidden cases")
    p.add_argument("--force", action="store_true", help="with --student-dist: replace DIR if it is not empty")

    p = sub.add_parser("grade", help="autograde COURSE/submitted/<student>/<assignment>/<notebook>.ipynb")
    p.add_argument("course", metavar="COURSE", help="the course folder (holding submitted/), or submitted/ itself")
    p.add_argument("--jobs", "-j", type=int, default=1, help="students graded at a time (default 1)")
    p.add_argument("--force", action="store_true", help="regrade everything, not only what changed")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--no-sandbox", action="store_true", help="grade without the sandbox, where bubblewrap cannot run: the "
                   "learners' code runs with your rights and can read the reference. For your own trusted work only, never a class")
    p.add_argument("--shard", metavar="K/N", help="grade only shard K of N (1 <= K <= N): the students whose id's sha256 "
                   "falls there, the same split on every node; then `merge` the N course folders")

    p = sub.add_parser("merge", help="take the results of courses graded with --shard into COURSE")
    p.add_argument("course", metavar="COURSE", help="the course folder that gets the grades (holding submitted/)")
    p.add_argument("shards", nargs="+", metavar="SHARD_COURSE", help="course folders graded with `grade --shard K/N`")

    p = sub.add_parser("demo", help="grade the example submissions in a temporary course folder")
    p.add_argument("--jobs", "-j", type=int, default=2)
    p.add_argument("--keep", metavar="DIR", help="grade in DIR and keep the results")

    p = sub.add_parser("new-exercise", help="add an exercise to a notebook, from its reference (written first, CONTRIBUTING.md): the "
                       "notebook's cells, the catalog's Exercise(...) with a skeleton of cases, and the TOML table of its mistakes")
    p.add_argument("notebook", metavar="NOTEBOOK", help="NN_name, or NN")
    p.add_argument("name", metavar="NAME", help="the exercise: a function or class of that name in the reference package")
    p.add_argument("--after", metavar="EXERCISE", help="the exercise of the notebook it comes after")
    p.add_argument("--kind", choices=("function", "module", "class"), help="how it is checked (default: from the reference)")
    p.add_argument("--points", type=float, default=1)
    p.add_argument("--difficulty", type=int, choices=(1, 2, 3), default=1, help="for the heading (default 1)")
    p.add_argument("--minutes", type=int, default=10, help="the time it takes, for the heading (default 10)")
    p.add_argument("--check", action="store_true", help="instead, list what the exercise still lacks: hidden cases, "
                   "mistakes caught on a public case, hints, text")


def run(args):
    if args.command == "check":
        return check(args.notebooks, junitxml=args.junitxml, timeout=args.timeout, save=args.save)
    if args.command == "progress":
        print(progress(args.folder))
        return 0
    if args.command == "release":
        from autograder.release import release

        root = find_root()
        if args.student_dist:
            from autograder.release.student_dist import build

            if args.dest:
                raise CourseError("--dest and --student-dist do not go together")
            build(root, args.student_dist, names=args.assignments or None, force=args.force)
            return 0
        dest = release(root, dest=args.dest, names=args.assignments or None)
        print(f"released {', '.join(args.assignments) or 'every assignment'} into {dest}")
        return 0
    if args.command == "grade":
        from autograder.grading.demo import summary
        from autograder.grading.grade import Grader
        from autograder.grading.shard import parse

        if args.jobs < 1:
            raise CourseError("--jobs must be at least 1")
        shard = parse(args.shard) if args.shard is not None else None  # before anything is graded
        grader = Grader(args.course, sandboxed=not args.no_sandbox, shard=shard)
        if hasattr(signal, "SIGUSR1"):  # `kill -USR1` prints where every thread of grade is, to diagnose a stuck run
            faulthandler.register(signal.SIGUSR1, all_threads=True)
        try:
            graded, skipped, failed = grader.run(jobs=args.jobs, force=args.force, progress=not args.no_progress)
        except KeyboardInterrupt:
            print("\nstopped: every grading process has ended; what was graded is kept, and `grade` again goes on from there",
                  file=sys.stderr)
            return 130
        print(f"graded {len(graded)}, unchanged {len(skipped)}, failed {len(failed)}" + (f" (shard {shard})" if shard else ""))
        print(summary(grader.course))
        print(f"\ngrades: {grader.course / 'grades.csv'}   feedback: {grader.course / 'feedback'}")
        if failed:
            print(f"{len(failed)} submission(s) got 0 because they could not be graded: see {grader.course / 'grading_problems.csv'}")
        # 0 once every submission has its grade, zeros for the ungradable included
        return 0
    if args.command == "merge":
        from autograder.grading.demo import summary
        from autograder.grading.shard import merge

        merged = merge(args.course, args.shards)
        print(summary(args.course))
        print(f"\nmerged {len(merged)} student(s) from {len(args.shards)} shard(s) into {args.course}: grades.csv, "
              "gradebook.db, autograded/ and feedback/")
        return 0
    if args.command == "demo":
        from autograder.grading.demo import demo

        return demo(jobs=args.jobs, keep=args.keep)
    if args.command == "new-exercise":
        from autograder.new_exercise import add, full_name, missing

        root = find_root()
        if args.check:
            lacks = missing(root, args.notebook, args.name)
            print("\n".join(f"- {line}" for line in lacks) or f"{args.name}: nothing missing")
            return 1 if lacks else 0
        if not args.after:
            raise CourseError("say where the exercise goes: --after EXERCISE")
        points = int(args.points) if args.points == int(args.points) else args.points
        changed = add(root, args.notebook, args.name, args.after, args.kind, points, args.difficulty, args.minutes)
        print(f"added {args.name}; written: {', '.join(str(p.relative_to(root)) for p in changed)}. Next: its cases and "
              f"mistakes, its text and hints (each TODO), then `python -m autograder new-exercise "
              f"{full_name(root, args.notebook)} {args.name} --check`")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())

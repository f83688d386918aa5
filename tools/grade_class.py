"""Grade a folder of student submissions locally (no Docker) and write one CSV of scores.

    make grade EXERCISE=02_data_parallel_from_scratch SUBMISSIONS=path/to/folder
    .venv/bin/python tools/grade_class.py dist/02_data_parallel_from_scratch/autograder/autograder.zip \\
        path/to/folder --csv grades.csv

Every ``*.ipynb`` in the folder is graded by ``otter run`` with the autograder zip that
``make student`` builds (hidden tests included), two at a time. A submission whose notebook raises
still gets the points of the tests that pass (otter skips the failing cell, as it would for the
student); one that runs longer than ``--timeout`` seconds is killed with everything it started
(kernel, worker processes) and gets a row saying so. The CSV has one row per submission: its file,
total, possible, the points of each question, and an error column. Each submission's full otter
results (the feedback a student would see) are kept under ``--out``.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from course_utils import kernels  # noqa: E402
from course_utils.subprocesses import CommandError, run_command  # noqa: E402

OTTER = Path(sys.executable).with_name("otter")


def grade_one(autograder: Path, submission: Path, out: Path, timeout_s: float) -> dict:
    """``otter run`` one submission; its scores by question, or why there are none."""
    out.mkdir(parents=True, exist_ok=True)
    row: dict = {"submission": submission.name, "total": 0.0, "possible": 0.0, "error": ""}
    try:
        proc = run_command([OTTER, "run", "-a", autograder, "-o", out, submission], timeout_s=timeout_s, check=False)
    except CommandError:
        row["error"] = f"timed out after {timeout_s:g} s (killed with its processes)"
        return row
    results = out / "results.json"
    if proc.returncode != 0 or not results.exists():
        row["error"] = f"otter run failed (exit code {proc.returncode}): {proc.stdout.strip().splitlines()[-1:]}"
        return row
    for test in json.loads(results.read_text())["tests"]:
        if "score" in test and test.get("name"):
            row[test["name"]] = test["score"]
            row["total"] += test["score"]
            row["possible"] += test["max_score"]
    return row


def grade_folder(autograder: Path, submissions: Path, csv_path: Path, out: Path, *, jobs: int = 2,
                 timeout_s: float = 600.0) -> list[dict]:
    """Grade every ``*.ipynb`` in ``submissions``; write ``csv_path``; return the rows."""
    if not autograder.is_file():
        raise SystemExit(f"{autograder} does not exist: run `make student` first (it builds the autograder zips)")
    notebooks = sorted(submissions.glob("*.ipynb"))
    if not notebooks:
        raise SystemExit(f"no .ipynb submissions in {submissions}/")
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        rows = list(pool.map(lambda nb: grade_one(autograder, nb, out / nb.stem, timeout_s), notebooks))
    questions = sorted({k for row in rows for k in row} - {"submission", "total", "possible", "error"})
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["submission", "total", "possible", *questions, "error"], restval="")
        writer.writeheader()
        writer.writerows(rows)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("autograder", type=Path, help="dist/NN_name/autograder/autograder.zip (make student)")
    parser.add_argument("submissions", type=Path, help="a folder of submitted .ipynb files")
    parser.add_argument("--csv", type=Path, default=Path("grades.csv"), help="where to write the scores")
    parser.add_argument("--out", type=Path, default=None, help="otter's results per submission "
                        "(default: a folder next to the CSV)")
    parser.add_argument("--jobs", type=int, default=2, help="submissions graded at once")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per submission")
    args = parser.parse_args(argv)
    kernels.use_for_every_kernel()  # otter's kernels on Unix sockets: two gradings never race for a port
    out = args.out or args.csv.with_suffix("")
    rows = grade_folder(args.autograder, args.submissions, args.csv, out, jobs=args.jobs, timeout_s=args.timeout)
    failed = [r["submission"] for r in rows if r["error"]]
    print(f"graded {len(rows)} submissions -> {args.csv}" + (f"; not graded: {failed}" if failed else ""))


if __name__ == "__main__":
    main()

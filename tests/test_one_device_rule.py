"""The rule "NCCL only when every rank has its own GPU, else gloo; COURSE_PROFILE=cpu keeps the ranks on
the CPU" is written once, in ``placement.ranks_get_gpus``. This test reads the course's code (modules,
scripts, benchmarks, recipes, tools, and the code cells of notebooks and exercises) and fails where a
second writing appears: a GPU count compared with a number of ranks, or "nccl" chosen by a condition."""
from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("course_utils", "grading", "notebooks", "exercises", "scripts", "benchmarks", "tools", "recipes")
HOME = "course_utils/placement.py"      # where the rule lives: its function ranks_get_gpus, and only there

GPUS = r"(?:\w*gpus?\w*|\w*device_count\(\)|len\(ids\)|visible)"
RANKS = r"(?:\w*world\w*|\w*ranks?\b|\w*nproc\w*|need)"
CMP = r"(?:<=|>=|<|>)"
SECOND_WRITINGS = {
    "a GPU count compared with a number of ranks": re.compile(
        rf"\b{GPUS}\s*{CMP}\s*(?:max\(1,\s*)?{RANKS}|\b{RANKS}\s*{CMP}\s*{GPUS}", re.IGNORECASE),
    "device_count() compared": re.compile(r"device_count\(\)\s*(?:<=|>=|<|>)|(?:<=|>=|<|>)\s*[\w.]*device_count\(\)"),
    '"nccl" chosen by a condition': re.compile(
        r"""["']nccl["']\s+if\b|\belse\s+["']nccl["']|["']gloo["']\s+if\b.*\belse\s+["']nccl["']"""),
}


def code_of(path: Path, home: bool = False) -> str:
    """A file's code: a notebook's code cells (prose may state the rule), else the whole text; in the
    rule's ``home``, the body of ``ranks_get_gpus`` blanked (lines keep their numbers)."""
    if path.suffix != ".ipynb":
        text = path.read_text(errors="replace")
        if home:
            text = re.sub(r"(?ms)^def ranks_get_gpus\(.*?(?=^\S)", lambda m: "\n" * m.group(0).count("\n"), text)
        return text
    cells = json.loads(path.read_text())["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def second_writings(root: Path) -> list[str]:
    """``"file:line: what: text"`` for every line of the course's code under ``root`` that writes the rule
    again (comments left out: they may explain it)."""
    found = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*")):
            rel = path.relative_to(root).as_posix()
            if path.suffix not in (".py", ".ipynb", ".sh") or "/." in f"/{rel}":
                continue
            for n, line in enumerate(code_of(path, home=rel == HOME).splitlines(), 1):
                code = line.split("#", 1)[0]
                for what, pattern in SECOND_WRITINGS.items():
                    if pattern.search(code) and "ranks_get_gpus(" not in code:   # asking the rule is fine
                        found.append(f"{rel}:{n}: {what}: {line.strip()}")
    return found


def test_the_rule_is_written_once():
    found = second_writings(ROOT)
    assert not found, ("the one-GPU-per-rank rule is written again outside course_utils/placement.py; "
                       "ask placement.plan / placement.ranks_get_gpus instead (launch.run(..., plan=PLAN)):\n  "
                       + "\n  ".join(found))


def test_the_search_finds_what_it_looks_for(tmp_path):
    """Planted second writings (the shapes the old tree had) are found; the rule's own function is not."""
    planted = {
        "course_utils/launch.py": "    if backend == 'nccl' and torch.cuda.device_count() < world_size:\n",
        "recipes/train.py": "backend = 'nccl' if torch.cuda.device_count() >= int(os.environ['WORLD']) else 'gloo'\n",
        "scripts/pick.py": "    if gpus >= world_size:\n        return 'nccl'\n",
        "benchmarks/b.py": "if visible < max(1, local_world_size):\n",
        "course_utils/placement.py": ("def ranks_get_gpus(ranks, gpus, profile):\n    return gpus >= ranks\n\n\n"
                                      "def local_backend(local_world_size, visible):\n"
                                      "    return visible >= local_world_size\n"),
    }
    for rel, text in planted.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    nb = {"cells": [{"cell_type": "markdown", "source": ["NCCL only if gpus >= world_size\n"]},
                    {"cell_type": "code", "source": ["DEVICE = 'cuda' if gpus >= 2 else 'cpu'\n",
                                                     "BACKEND = 'nccl' if ok else 'gloo'\n"]}]}
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "x.ipynb").write_text(json.dumps(nb))
    found = "\n".join(second_writings(tmp_path))
    for rel in ("course_utils/launch.py:1", "recipes/train.py:1", "scripts/pick.py:1", "benchmarks/b.py:1",
                "notebooks/x.ipynb:2"):
        assert rel in found, (rel, found)
    assert "course_utils/placement.py:6" in found             # a second writing beside the rule's home
    assert "placement.py:2" not in found and "notebooks/x.ipynb:1" not in found


def backends_passed(notebook: Path) -> list[str]:
    """``"file cell N: backend=..."`` for every ``launch.run(...)`` in ``notebook``'s code cells that passes a
    backend of its own. ``backend=None`` (no process group at all) is not a choice of device: chapter 03
    teaches ``init_process_group`` by hand, and its workers get the plan's backend as an argument."""
    import ast

    found = []
    for n, cell in enumerate(json.loads(notebook.read_text())["cells"]):
        if cell["cell_type"] != "code":
            continue
        lines = "".join(cell["source"]).splitlines()
        code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in lines)
        try:
            tree = ast.parse(code)
        except SyntaxError:   # a %%writefile cell's file: not launched from the notebook
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run"
                    and getattr(node.func.value, "id", None) == "launch"):
                for kw in node.keywords:
                    if kw.arg == "backend" and not (isinstance(kw.value, ast.Constant) and kw.value.value is None):
                        found.append(f"{notebook.name} cell {n}: backend={ast.unparse(kw.value)}")
    return found


def test_no_chapter_passes_a_backend_to_launch_run():
    """The plan decides where ranks run: a chapter passes ``plan=PLAN``, or ``plan=placement.cpu_plan(n)`` for a
    cell that measures the CPU on purpose, never ``backend="gloo"``/``"nccl"``/``BACKEND`` by hand."""
    found = [hit for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")) for hit in backends_passed(nb)]
    assert found == [], found


def test_a_backend_passed_by_hand_is_found(tmp_path):
    cells = [{"cell_type": "code", "source": ["%%time\n", "launch.run(w, 2, backend=BACKEND)\n"]},
             {"cell_type": "code", "source": ["launch.run(w, 2, plan=PLAN)\n", "launch.run(w, 2, backend=None)\n"]},
             {"cell_type": "markdown", "source": ["launch.run(w, 2, backend='gloo')"]},
             {"cell_type": "code", "source": ["x = launch.run(w, 2, args=(1,), backend=\"gloo\")[0]\n"]}]
    planted = tmp_path / "99_planted.ipynb"
    planted.write_text(json.dumps({"cells": cells}))
    assert backends_passed(planted) == ["99_planted.ipynb cell 0: backend=BACKEND",
                                        "99_planted.ipynb cell 3: backend='gloo'"]

"""Convert a jupytext percent-format script into a notebook with the course's kernel metadata.

    .venv/bin/python tools/percent_to_ipynb.py src.py notebooks/NN_name.ipynb

An authoring aid: the committed .ipynb is the source of truth (edit it in JupyterLab afterwards).
"""
import sys

import jupytext
import nbformat

src, dst = sys.argv[1], sys.argv[2]
nb = jupytext.read(src, fmt="py:percent")
nb.metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
               "language_info": {"name": "python"}}
for cell in nb.cells:
    cell.metadata.pop("lines_to_next_cell", None)
nbformat.write(nb, dst)

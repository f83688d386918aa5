"""What a stored notebook shows, for the tests that compare a rendering with it."""
import nbformat


def png_outputs(nb: nbformat.NotebookNode) -> int:
    """Number of figures (image/png outputs) stored in ``nb``'s code cells."""
    return sum("image/png" in out.get("data", {}) for c in nb.cells if c.cell_type == "code" for out in c.outputs)

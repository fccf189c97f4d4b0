"""Executes a notebook top to bottom under a real Jupyter kernel (nbclient), in `notebooks/`.

    python notebooks/execute.py NOTEBOOK [--write]

Prints what the first code cell printed (which data it reads) and how many cells and figures
it made; a failing cell fails the run. With `--write`, the notebook is saved with its outputs:
how the committed notebooks are regenerated (`examples/regenerate.sh`). The test suite runs it
without `--write`, so CI always executes the notebooks fresh.
"""

import os
import pathlib
import sys

import nbclient
import nbformat

path = pathlib.Path(sys.argv[1])
write = "--write" in sys.argv[2:]
os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
nb = nbformat.read(path, as_version=4)
client = nbclient.NotebookClient(
    nb,
    timeout=300,
    kernel_name="python3",
    record_timing=False,
    resources={"metadata": {"path": str(pathlib.Path(__file__).resolve().parent)}},
)
client.execute()
first = next(c for c in nb.cells if c.cell_type == "code")
print("".join(o.get("text", "") for o in first.get("outputs", []) if o.get("output_type") == "stream"))
images = sum(1 for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {}))
print(f"executed {len(nb.cells)} cells, {images} figures")
if write:
    nb.metadata.pop("widgets", None)
    nbformat.write(nb, path)

"""The cells of the notebooks of this folder, one module per notebook, each a list of
:data:`~notebook_cells.cell.Cell` built with the helpers of :mod:`notebook_cells.cell`;
``notebooks/make_notebooks.py`` writes them out."""

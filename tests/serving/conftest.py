"""Shared by every serving test: pytest puts the folder of each ``conftest.py`` on
``sys.path``, so this folder's helper modules import by name from the tests below it:
``serve_processes`` (real ``kvcast`` processes on loopback, read up to their ready line) and
``onnx_models`` (real kvcast ONNX models built with onnx.helper)."""

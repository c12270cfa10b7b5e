"""mlcc for training frameworks.

* :mod:`mlcc.progress` — the progress file mlccd reads (``patches/progress/mlcc_progress.h``).
* :mod:`mlcc.ring` — the bytes a ring all-reduce moves, as Gloo and NCCL move them.
* :mod:`mlcc.torch` — a PyTorch DDP comm hook that writes the progress file.
"""

__version__ = "0.1.0"

"""mlcc for PyTorch DDP: a communication hook that writes mlccd's progress file.

    import mlcc.torch
    model = DistributedDataParallel(net)
    mlcc.torch.register(model)          # before the first backward pass

With ``MLCC_JOB_ID`` set (the job's name, as mlccd should see it), every rank then writes
``$MLCC_SHM_DIR/mlcc.<job>.worker.<rank>.<pid>``: an iteration begins with each step's first
gradient bucket, and each bucket counts the bytes the backend's ring all-reduce moves for it
(exactly for Gloo, see :mod:`mlcc.ring`). Without ``MLCC_JOB_ID``, or when the file cannot be
made, the hook warns once and only forwards to the all-reduce: training never fails because of
mlcc. The Gloo and NCCL backends work unchanged; another hook can be wrapped
(``register(model, inner=fp16_compress_hook)``).
"""

from .hook import ProgressState, progress_hook, register, wire_of

__all__ = ["ProgressState", "progress_hook", "register", "wire_of"]

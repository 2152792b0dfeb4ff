"""What the framework entry points (:mod:`tracker.lightning`, :mod:`tracker.pytorch_lightning`,
:mod:`tracker.transformers`) share; no framework is imported here.

- :mod:`.common`: samples in a batch, one step's FLOPs, the run id every rank agrees on;
- :mod:`.lightning_hooks`: the Lightning hooks, one body for ``lightning`` and
  ``pytorch_lightning``;
- :mod:`.distributed`: rank, world size and the one small all-gather at log steps.
"""

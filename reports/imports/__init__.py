"""``gpu-kpi import``, two kinds (ARCHITECTURE.md, "Seams"):

- runs that were not tracked by our callback, from the logs teams already keep (nvidia-smi,
  W&B, TensorBoard, Prometheus/DCGM), written to the run store like the tracker's: a run record
  and per-minute samples, with ``source`` saying where they came from;
- what a scheduler allocated (Slurm's ``sacct``, Kubernetes pods from kube-state-metrics):
  allocation rows and the nodes' capacity, no samples; the week's join sets them against the
  samples that say what their GPUs did.
"""

"""Sinks: where the metrics go. The same metric names (:mod:`tracker.metrics`) reach each one.

- :mod:`.base`: the :class:`Sink` interface, :class:`SinkSet` (a failing sink is turned off with
  one warning, training goes on) and :class:`LoggingSink` (Python logging, logger ``gpu_kpi``);
- :mod:`.wandb`: Weights & Biases (the only ``wandb`` importer), public as :mod:`tracker.wandb`;
- :mod:`.tensorboard`: TensorBoard event files, public as :mod:`tracker.tensorboard`;
- :mod:`.summary`: the run's final values as flat pairs and a Markdown table, for summaries;
- :mod:`.console`: the summary a run prints when it ends (global rank 0);
- :mod:`.webhook`: chat webhooks (Slack, Teams, JSON): the live alerts (`WebhookSink`) and
  `post`, which the service's cards use too.

A new sink implements :class:`Sink` and gets ``tests/contracts/test_sink_contract.py`` by adding a line
to its fixture.
"""

from tracker.sinks.base import LoggingSink, Sink, SinkSet, format_summary

__all__ = ["LoggingSink", "Sink", "SinkSet", "format_summary"]

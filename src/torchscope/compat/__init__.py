"""The torch.profiler skin, in one place: the objects a script written for torch reads.

* ``FunctionEvent`` / ``EventList``: ``prof.events()`` (``compat.events``), with the keyword
  inputs and Kineto metadata of ``compat.event_args``;
* ``KeyAverage`` / ``KeyAverages``: ``prof.key_averages()`` (``compat.averages``), torch's
  ``FunctionEventAvg`` and its list;
* the torch-layout table and its options (``compat.table``: ``TableOptions``, ``build_table``).

The numbers all come from ``analysis.key_averages``; nothing here computes an analysis, and
nothing under ``analysis/`` imports this package. Only ``device_type`` properties import torch,
lazily, so a trace's table prints where torch is not installed.
"""

from __future__ import annotations

from torchscope.compat.averages import KeyAverage, KeyAverages, key_averages
from torchscope.compat.events import EventList, FunctionEvent, export_stacks
from torchscope.compat.table import TableOptions, build_table

__all__ = [
    "EventList",
    "FunctionEvent",
    "KeyAverage",
    "KeyAverages",
    "TableOptions",
    "build_table",
    "export_stacks",
    "key_averages",
]

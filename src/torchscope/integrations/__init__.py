"""Where users already profile: Lightning, Hugging Face, mmengine and notebooks.

Each module imports its framework when it is imported itself, never before: ``import
torchscope`` imports none of them. Install the framework with its extra
(``pip install 'torchscope[lightning]'``, ``[huggingface]``, ``[mmengine]``, ``[notebook]``).

- ``torchscope.integrations.lightning.TorchscopeProfiler``: ``Trainer(profiler=...)``;
- ``torchscope.integrations.huggingface.TorchscopeCallback``: ``trainer.add_callback(...)``;
- ``torchscope.integrations.mmengine.TorchscopeProfilerHook``: ``custom_hooks=[dict(type=...)]``;
- ``torchscope.integrations.notebook``: rich display, ``torchscope.show(x)``, ``%%torchscope``.
"""

"""headbench: which classification head should sit on a pretrained encoder?

The package is laid out as the pipeline runs; dependencies flow one way (checked by
``tests/test_layout.py``):

- ``errors``, ``atomic``, ``clock``, ``paths``: foundations every wing may import;
- ``data/``: tasks (registry, torch-free metadata), file readers, label alignment,
  samplers, tokenization cache, data modules;
- ``axes/``: the registries of the grid's other axes (layer selections, heads, freezing
  strategies, encoders), torch-free;
- ``cell``: what a grid cell is: identity, run directory, config hash, result file;
- ``model/``: encoders, heads, freezing and adaptation, metrics, the LightningModule;
- ``cache/``: the frozen hidden-state cache;
- ``run/``: ``run(cfg)``, the command line, plan, preflight, resume, callbacks, launchers;
- ``results/``: collect, statistics, tables, references (never imports torch);
- ``report/``: the HTML report (imports ``results/`` only).
"""

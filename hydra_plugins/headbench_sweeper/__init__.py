"""headbench's Hydra sweeper plugin: ``hydra/sweeper=grid`` (see :mod:`bench.axes.sweep`)."""

"""headbench's Hydra launcher plugin: ``hydra/launcher=lockstep`` (bench.run.lockstep)."""

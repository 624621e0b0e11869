"""Running cells: ``run(cfg)``, the command line, plan, preflight, resume, callbacks, launchers."""

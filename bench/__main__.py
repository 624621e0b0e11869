"""Command line: ``python -m bench [overrides]`` trains one cell, ``-m`` sweeps.

Examples:
    python -m bench task=sst2 encoder=minilm head=bilstm freeze=frozen seed=1
    python -m bench -m experiment=quick
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig


def config_dir() -> Path:
    """The Hydra config tree: ``bench/conf`` in a wheel, the repo's ``conf/`` in a checkout."""
    here = Path(__file__).resolve().parent
    packaged = here / "conf"
    return packaged if packaged.is_dir() else here.parent / "conf"


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    from bench.train import run

    hydra_cfg = HydraConfig.get()
    result = run(cfg, hydra_cfg.runtime.output_dir)
    status = result["status"]
    print(f"{status}: {hydra_cfg.runtime.output_dir}/result.json")
    if status != "ok" and hydra_cfg.mode == RunMode.RUN:
        print(f"reason: {result['reason']}", file=sys.stderr)
        sys.exit(1)


def main() -> None:
    """Entry point of ``python -m bench`` and the ``headbench`` script."""
    _hydra_main()


if __name__ == "__main__":
    main()

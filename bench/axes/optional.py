"""Optional axes that name a cell besides task, encoder, head, freeze and seed (torch-free).

- ``train_size`` (``data.train_size``): a learning curve sweeps it. It becomes a level of
  the run directory when the sweep lists it in ``axes`` (``.../train_size=400/seed=1``).
- ``order_seed``: the seed of the training batch order alone, so that head initialisation
  (``seed``) and data order can vary separately. None (the default) draws the order from
  ``seed`` as before; set, the run directory is ``seed=N-order=M``.

- ``pair_encoding``: how a sentence-pair task poses its pair (pair tasks only): ``cross``
  (one sequence, as before; null is the same) or ``siamese`` (each sentence encoded alone,
  the classifier sees ``[u, v, |u-v|, u*v]``). ``siamese`` is hashed and adds ``-siamese``
  to the head's label (``mean_linear-siamese``: its run directory, its search trials and its
  column in the tables); ``cross`` changes neither.

Results written before these axes existed lack them in their ``cell``; readers take them
from the stored config (:func:`bench.results.collect.tidy`).
"""

from __future__ import annotations

from omegaconf import OmegaConf

#: The optional axes, in table order; None where a cell does not set them.
AXIS_COLUMNS = ["train_size", "order_seed"]
#: What ``axes`` may list: the optional axes that become a directory level when listed.
PATH_AXES = ("train_size",)
#: ``pair_encoding``: how a pair task poses its two sentences (null: ``cross``).
PAIR_ENCODINGS = ("cross", "siamese")


def leaf_dir(
    seed: object, order_seed: object = None, train_size: object = None, axes: object = ()
) -> str:
    """The part of a run directory below ``freeze_label``: ``seed=N`` and the optional axes.

    Args:
        seed: The training seed.
        order_seed: The batch-order seed, or None (drawn from ``seed``): ``seed=N-order=M``.
        train_size: ``data.train_size`` (None: the whole training split).
        axes: The listed optional axes; with ``train_size`` the size is a level of its own
            (``train_size=400/seed=N``; ``train_size=all`` for the whole split).

    Returns:
        The relative path, ``/``-separated.
    """
    listed = OmegaConf.to_container(axes) if OmegaConf.is_config(axes) else axes
    leaf = f"seed={seed}" if order_seed is None else f"seed={seed}-order={order_seed}"
    if isinstance(listed, list | tuple) and "train_size" in listed:
        size = "all" if train_size is None else train_size
        return f"train_size={size}/{leaf}"
    return leaf

"""The batch keys an encoder forward reads, in the one order every reader uses.

The order matters beyond the forward: the feature cache digests a split's inputs key by
key in this order (:mod:`bench.cache.keys`), so changing it re-keys every cache entry.
"""

from __future__ import annotations

#: Inputs of an encoder forward, when the tokenizer produces them (``token_type_ids`` only
#: for BERT-style tokenizers).
ENCODER_KEYS = ("input_ids", "token_type_ids", "attention_mask")

#: Under ``pair_encoding=siamese`` (:data:`bench.axes.optional.PAIR_ENCODINGS`) an example's
#: (and a batch's) encoder inputs are its first sentence alone; the second sentence's inputs
#: (and, served from the cache, its states) sit under this key, the same keys again.
SECOND_SENTENCE = "sentence_b"

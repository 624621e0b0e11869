"""Data: the task registry, GLUE and CoNLL-2003 readers, label alignment, samplers, data modules."""

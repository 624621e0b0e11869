"""The grid's axes besides tasks: each name defined once, validated once (torch-free).

``layers`` (layer selections), ``heads`` (head presets), ``freezing`` (strategies); the
label resolvers the config tree uses are registered on import (:mod:`bench.axes.resolvers`).
"""

from bench.axes.resolvers import register

register()

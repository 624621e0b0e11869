"""The grid's axes besides tasks: each name defined once, validated once (torch-free)."""

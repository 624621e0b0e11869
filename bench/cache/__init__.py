"""The frozen hidden-state cache: build, verify and serve the states of frozen layers."""

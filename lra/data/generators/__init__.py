"""Procedural generators for the two LRA tasks whose data is synthetic: ListOps and Pathfinder.

`listops.generate` and `pathfinder.generate` write the release's on-disk layout, so the
loaders in `lra.data` read generated and downloaded data the same way. Nothing heavy is
imported here: both generators need only the standard library, numpy and Pillow.
"""

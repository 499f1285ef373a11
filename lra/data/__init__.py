"""LRA data: loaders for the six tasks and generators for ListOps and Pathfinder.

Use `lra.tasks.load_task(name, data_dir)` to get train/val/test `Split`s and
`lra.data.batching.make_loader` to batch them. The data root (`--data_dir`, or
`$LRA_DATA_DIR`) may use either layout below, or mix them; for each task the
S4-style folder is tried first, then the release folders.

S4-style layout::

    <data_dir>/
      listops/basic_{train,val,test}.tsv         # or listops-1000/ (what the generator writes)
      aan/new_aan_pairs.{train,eval,test}.tsv    # copy of the release's tsv_data/
      pathfinder/pathfinder32/curv_contour_length_14/{imgs,metadata}/
      pathfinder/pathfinder128/curv_contour_length_14/{imgs,metadata}/
      imdb/aclImdb_v1.tar.gz                     # or imdb/aclImdb/ (extracted)
      cifar10/cifar-10-binary.tar.gz             # or cifar-10-python.tar.gz,
                                                 # cifar-10-batches-{bin,py}/
      tfds/                                      # optional, array_record only:
        imdb_reviews/plain_text/1.0.0/  cifar10/3.0.2/
      cache/                                     # written by the loaders

Release layout (`lra_release.gz` extracted; `<data_dir>` may be the folder holding
`lra_release/`, the outer `lra_release/` or the inner one)::

    <data_dir>/lra_release/lra_release/
      listops-1000/  tsv_data/  pathfinder32/  pathfinder128/  (pathfinder64/ 256/)

The nested copy is preferred over the archive's stale top-level duplicates. IMDB and
CIFAR-10 are not in the release: put them under `imdb/` and `cifar10/` as above
(`aclImdb_v1.tar.gz` from https://ai.stanford.edu/~amaas/data/sentiment/,
`cifar-10-binary.tar.gz` from https://www.cs.toronto.edu/~kriz/). Generated data:
`python -m lra.data generate listops --out <data_dir>` and
`python -m lra.data generate pathfinder --resolution 32|128 --difficulty hard
--num 200000 --out <data_dir>` write `listops-1000/` and `pathfinder{32,128}/…`
directly under `<data_dir>`, which the release lookup finds.

Pathfinder also accepts `<data_dir>` pointing at `pathfinder32/` or at the difficulty
folder itself. Missing or malformed files raise `MissingDataError` /
`MalformedDataError` naming the path and the fix.
"""

from lra.data.errors import MalformedDataError, MissingDataError

__all__ = ["MalformedDataError", "MissingDataError"]

"""Write ``megengine_data_transforms.npz``: MegEngine 1.13's outputs for the cases of
``megengine_data_cases.py`` (vision transforms, samplers, DataLoader worker seeds), read by
tests/test_data_transform.py and tests/test_data_sampler.py.

Run with MegEngine's interpreter (never a test dependency; the tests only read the .npz)::

    /work/meg/bin/python tests/data/gen_megengine_data_refs.py

Transform outputs are stored per output field as ``<case>/out<i>`` (with the inputs regenerated
from the case's seed on both sides); sampler batches as ``sampler/<case>/epoch<k>`` (rows padded
with -1); loader seeds as ``loader_seed/<s>``. It also records ``cv2_version``.
"""
import os
import random
import sys

import numpy as np

import cv2
import megengine
import megengine.data.sampler as S
import megengine.data.transform as T
from megengine.data.dataset import ArrayDataset
from megengine.random.rng import _random_seed_generator

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from megengine_data_cases import (BATCH_CASE, CASES, LOADER_SEEDS, SAMPLER_CASES,  # noqa: E402
                                  SAMPLER_DATASET_LEN, sample)

OUT = os.path.join(HERE, "megengine_data_transforms.npz")


def main():
    refs = {"cv2_version": np.array(cv2.__version__), "megengine_version":
            np.array(megengine.__version__)}
    for name, make, order, fields, seed in CASES:
        t = make(T)
        x = sample(fields, seed)
        np.random.seed(seed)
        random.seed(seed)
        out = t.apply(x if len(x) > 1 else x[0])
        out = out if isinstance(out, tuple) else (out,)
        for i, o in enumerate(out):
            refs["%s/out%d" % (name, i)] = np.asarray(o)
    name, make, seed = BATCH_CASE
    batch = [sample(("image", "image_category"), seed + k) for k in range(3)]
    np.random.seed(seed)
    for k, (img, cat) in enumerate(make(T).apply_batch(batch)):
        refs["%s/sample%d" % (name, k)] = img
    ds = ArrayDataset(np.arange(SAMPLER_DATASET_LEN))
    for name, make, epochs in SAMPLER_CASES:
        sampler = make(S, ds)
        for e in range(epochs):
            rows = list(sampler)
            width = max(len(r) for r in rows)
            refs["sampler/%s/epoch%d" % (name, e)] = np.array(
                [list(r) + [-1] * (width - len(r)) for r in rows], dtype=np.int64)
        refs["sampler/%s/len" % name] = np.array(len(sampler))
    for s, n in LOADER_SEEDS:
        megengine.random.seed(s)
        refs["loader_seed/%d" % s] = np.array([next(_random_seed_generator()) for _ in range(n)],
                                              dtype=np.int64)
    np.savez_compressed(OUT, **refs)
    print("wrote %s: %d arrays" % (OUT, len(refs)))


if __name__ == "__main__":
    main()

"""The cases of ``megengine_data_transforms.npz``, shared by its generator (run with MegEngine)
and tests/test_data_transform.py (run with mge). ``T`` is the transform module of either.

Each case: ``(name, make(T) -> transform, order, fields, seed)``; the sample is built by
``sample(fields, seed)`` from its own RandomState, then ``np.random.seed(seed)`` and
``random.seed(seed)`` are set and ``transform.apply(sample)`` is recorded, one key per output field
(``<name>/out<i>``).
"""
import numpy as np

H, W = 20, 24


def sample(fields, seed):
    rng = np.random.RandomState(1000 + seed)
    out = []
    for f in fields:
        if f == "image":
            out.append(rng.randint(0, 256, size=(H, W, 3)).astype(np.uint8))
        elif f == "gray":
            out.append(rng.randint(0, 256, size=(H, W, 1)).astype(np.uint8))
        elif f == "boxes":
            xy = rng.uniform(0, 10, size=(3, 2))
            wh = rng.uniform(1, 10, size=(3, 2))
            out.append(np.concatenate([xy, xy + wh], axis=1).astype(np.float32))
        elif f == "mask":
            out.append(rng.randint(0, 5, size=(H, W, 1)).astype(np.uint8))
        elif f == "keypoints":
            kp = rng.uniform(0, 18, size=(2, 3, 3)).astype(np.float32)
            kp[..., 2] = rng.randint(0, 3, size=(2, 3))
            out.append(kp)
        elif f == "image_category":
            out.append(np.int32(rng.randint(0, 10)))
        else:
            raise ValueError(f)
    return tuple(out)


IMG = ("image",)
DET = ("image", "boxes", "image_category")
SEG = ("image", "mask")
KPT = ("image", "keypoints")

CASES = [
    ("normalize", lambda T: T.Normalize(mean=[103, 116, 123], std=[57, 57, 58]), IMG, IMG, 1),
    ("tomode", lambda T: T.ToMode("CHW", order=SEG), SEG, SEG, 2),
    ("resize_hw", lambda T: T.Resize((12, 16), order=SEG + ("boxes",)), SEG + ("boxes",),
     ("image", "mask", "boxes"), 3),
    ("resize_short", lambda T: T.Resize(15, order=DET), DET, DET, 4),
    ("resize_cubic", lambda T: T.Resize((30, 33), interpolation=2), IMG, IMG, 5),
    ("resize_choice", lambda T: T.Resize((9, 11), interpolation=[0, 1, 3]), IMG, IMG, 6),
    ("shortest_edge_range", lambda T: T.ShortestEdgeResize((10, 18), 30, order=DET), DET, DET, 7),
    ("shortest_edge_choice",
     lambda T: T.ShortestEdgeResize((8, 12, 16), 20, sample_style="choice"), IMG, IMG, 8),
    ("random_resize", lambda T: T.RandomResize((0.5, 1.5), order=SEG), SEG, SEG, 9),
    ("random_crop", lambda T: T.RandomCrop((16, 16), padding_size=2, padding_value=[1, 2, 3],
                                           order=("image", "boxes", "mask")),
     ("image", "boxes", "mask"), ("image", "boxes", "mask"), 10),
    ("random_crop_big", lambda T: T.RandomCrop((30, 28), padding_maskvalue=7, order=SEG), SEG, SEG,
     11),
    ("random_resized_crop", lambda T: T.RandomResizedCrop(10, order=DET), DET, DET, 12),
    ("random_resized_crop_rect", lambda T: T.RandomResizedCrop((8, 14), scale_range=(0.3, 0.6),
                                                               order=SEG), SEG, SEG, 13),
    ("center_crop", lambda T: T.CenterCrop((10, 12), order=KPT), KPT, KPT, 14),
    ("hflip", lambda T: T.RandomHorizontalFlip(0.5, order=DET), DET, DET, 15),
    ("hflip_kpt", lambda T: T.RandomHorizontalFlip(1.0, order=KPT), KPT, KPT, 16),
    ("vflip", lambda T: T.RandomVerticalFlip(1.0, order=SEG + ("boxes",)), SEG + ("boxes",),
     ("image", "mask", "boxes"), 17),
    ("pad_int", lambda T: T.Pad(3, value=[1, 2, 3], mask_value=9, order=SEG), SEG, SEG, 18),
    ("pad_two", lambda T: T.Pad((2, 5), order=DET), DET, DET, 19),
    ("pad_float", lambda T: T.Pad((1, 2, 3, 4), value=0.5), IMG, IMG, 20),
    ("brightness", lambda T: T.BrightnessTransform(0.5), IMG, IMG, 21),
    ("contrast", lambda T: T.ContrastTransform(0.5), IMG, IMG, 22),
    ("saturation", lambda T: T.SaturationTransform(0.5), IMG, IMG, 23),
    ("hue", lambda T: T.HueTransform(0.2), IMG, IMG, 24),
    ("color_jitter", lambda T: T.ColorJitter(0.4, 0.4, 0.4, 0.1, order=DET), DET, DET, 25),
    ("lighting", lambda T: T.Lighting(0.1), IMG, IMG, 26),
    ("gaussian_noise", lambda T: T.GaussianNoise(0.0, 0.05), IMG, IMG, 27),
    ("compose", lambda T: T.Compose([T.RandomResizedCrop(12), T.RandomHorizontalFlip(),
                                     T.ColorJitter(0.3, 0.3, 0.3), T.Normalize(127, 64),
                                     T.ToMode("CHW")], order=DET), DET, DET, 28),
    ("compose_shuffle", lambda T: T.Compose([T.BrightnessTransform(0.4), T.ContrastTransform(0.4),
                                             T.Lighting(0.2), T.RandomVerticalFlip()],
                                            shuffle_indices=[(1, 2, 3)]), IMG, IMG, 29),
    ("gray_pipeline", lambda T: T.Compose([T.Resize((10, 10)), T.RandomCrop(8, padding_size=1),
                                           T.Normalize(33.3, 78.5), T.ToMode()]),
     IMG, ("gray",), 30),
]

# apply_batch of a batch_compose Compose: 3 samples, one draw per transform for the whole batch
BATCH_CASE = ("batch_compose", lambda T: T.Compose([T.RandomHorizontalFlip(), T.Normalize(10, 2)],
                                                   batch_compose=True), 31)

# samplers: (name, make(sampler module, dataset) -> sampler, epochs)
SAMPLER_CASES = [
    ("random", lambda S, ds: S.RandomSampler(ds, batch_size=4, seed=3), 2),
    ("random_indices", lambda S, ds: S.RandomSampler(ds, batch_size=3, indices=list(range(5, 15)),
                                                     seed=4), 1),
    ("random_shard1of3", lambda S, ds: S.RandomSampler(ds, batch_size=2, world_size=3, rank=1), 2),
    ("random_shard2of3_drop", lambda S, ds: S.RandomSampler(ds, batch_size=3, drop_last=True,
                                                             world_size=3, rank=2, seed=9), 1),
    ("sequential_shard0of4", lambda S, ds: S.SequentialSampler(ds, batch_size=2, world_size=4,
                                                               rank=0), 1),
    ("sequential_shard3of4", lambda S, ds: S.SequentialSampler(ds, batch_size=4, world_size=4,
                                                               rank=3), 1),
    ("replacement", lambda S, ds: S.ReplacementSampler(ds, batch_size=5, num_samples=12, seed=5), 2),
    ("replacement_weights", lambda S, ds: S.ReplacementSampler(
        ds, batch_size=4, weights=list(range(1, 23)), seed=6), 1),
    ("replacement_shard", lambda S, ds: S.ReplacementSampler(ds, batch_size=3, num_samples=10,
                                                             world_size=2, rank=1), 1),
]
SAMPLER_DATASET_LEN = 22

# DataLoader base seeds drawn after megengine.random.seed(s): (s, number of iterators)
LOADER_SEEDS = [(7, 3), (12345, 2)]

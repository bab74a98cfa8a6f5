"""Data for the paper reproductions (zones, Park's experiments, the digits MLP), with the tie mechanisms made
explicit.

Why ties (exact kinks) arise in real images (Park et al., App. G "Examples of identical image patches";
Boustany, Ch.3, Fig 3.1):
* **flat backgrounds**: MNIST digits sit on exact zeros, so every conv output over a blank receptive field
  equals the bias exactly and every 2x2 maxpool window over it is a 4-way tie;
* **zero padding**: borders repeat the same pattern, producing equal outputs at many positions;
* **duplicated patches**: nearest-neighbour upsampling (and repeated textures) makes neighbouring receptive
  fields identical, so a maxpool window sees the same value several times.

Provided here (no download): ``digits28`` (scikit-learn's 8x8 digits, values k/16, nearest-upsampled x3 to
24x24 and zero-padded to 28x28: all three mechanisms), ``digits64`` (the same digits as flat vectors),
``digits_upsampled`` (nearest interpolation to any size, with synthetic plateau images: Park's experiments),
``plateaus`` (CIFAR-shaped 3x32x32 images made of constant dyadic blocks on an exact-zero background, some
blocks duplicated), ``natural_crops`` (crops of scikit-learn's two sample photographs), ``text_tokens`` (byte
tokens of the English dataset descriptions that ship with scikit-learn, for language models).
``load_mnist``/``load_cifar10`` read files a user already has and fail with a clear message otherwise.
"""
from __future__ import annotations

import functools
import gzip
import pickle
from pathlib import Path

import numpy as np
import torch

from nsverify.errors import NsverifyError


class DataNotFoundError(NsverifyError, FileNotFoundError):
    """A dataset file that is not on disk (nsverify never downloads data)."""


@functools.lru_cache(maxsize=1)
def _digits8() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits (8x8, 0..16): read its bundled CSV directly (importing sklearn takes seconds)."""
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    path = Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz" if spec else None
    if path is not None and path.exists():
        raw = np.loadtxt(path, delimiter=",")
        return raw[:, :-1].reshape(-1, 8, 8), raw[:, -1].astype(np.int64)
    from sklearn.datasets import load_digits  # pragma: no cover - layout changed

    d = load_digits()
    return d.images, d.target


def digits28(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """The 1797 scikit-learn digits as (N, 1, 28, 28) images with exact values k/16, and labels."""
    images, target = _digits8()
    x = torch.tensor(images, dtype=torch.float64) / 16.0
    x = x.repeat_interleave(3, 1).repeat_interleave(3, 2)  # 24x24, duplicated patches
    x = torch.nn.functional.pad(x, (2, 2, 2, 2))  # flat zero border
    return x.unsqueeze(1).to(dtype), torch.tensor(target, dtype=torch.long)


def digits64(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """The 1797 scikit-learn digits as flat 64-vectors with exact values k/16 in [0, 1], and labels."""
    images, target = _digits8()
    return torch.tensor(images, dtype=dtype).reshape(len(images), -1) / 16, torch.tensor(target)


def digits_upsampled(size: int, plateau: int = 0, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, 1, size, size) float32 images: the digits nearest-interpolated from 8x8 to ``size`` x ``size`` (flat
    backgrounds and duplicated pixels, as in Park et al.'s App. G), plus ``plateau`` synthetic images of 1-3
    constant blocks (values k/4) on an exact-zero background (label = number of blocks - 1); shuffled with
    ``seed``."""
    x, y = digits64()
    x = torch.nn.functional.interpolate(x.reshape(-1, 1, 8, 8), size=(size, size), mode="nearest")
    if plateau:
        g = torch.Generator().manual_seed(seed)
        P = torch.zeros(plateau, 1, size, size)
        py = torch.randint(0, 3, (plateau,), generator=g)
        for i in range(plateau):
            for _ in range(int(py[i]) + 1):
                h, w = torch.randint(3, size // 2, (2,), generator=g).tolist()
                r = torch.randint(0, size - h, (1,), generator=g).item()
                c = torch.randint(0, size - w, (1,), generator=g).item()
                P[i, 0, r : r + h, c : c + w] = torch.randint(1, 5, (1,), generator=g).item() / 4
        x, y = torch.cat([x, P]), torch.cat([y, py])
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    return x[perm], y[perm]


def plateaus(n: int = 512, seed: int = 0, shape: tuple[int, int, int] = (3, 32, 32), classes: int = 10,
             dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic CIFAR-shaped images with exact plateaus: 1-4 constant blocks (values k/8 per channel) on an
    exact-zero background; one block in two is duplicated elsewhere.  Label = colour class of the first block
    (so a model can learn it)."""
    g = np.random.default_rng(seed)
    c, h, w = shape
    x = np.zeros((n, c, h, w))
    y = np.zeros(n, dtype=np.int64)
    for i in range(n):
        for b in range(g.integers(1, 5)):
            bh, bw = g.integers(4, h // 2 + 1), g.integers(4, w // 2 + 1)
            r, q = g.integers(0, h - bh + 1), g.integers(0, w - bw + 1)
            colour = g.integers(1, 9, size=c) / 8.0
            x[i, :, r:r + bh, q:q + bw] = colour[:, None, None]
            if b == 0:
                y[i] = int(colour.sum() * 8) % classes
            if g.random() < 0.5:  # duplicated patch
                r2, q2 = g.integers(0, h - bh + 1), g.integers(0, w - bw + 1)
                x[i, :, r2:r2 + bh, q2:q2 + bw] = x[i, :, r:r + bh, q:q + bw]
    return torch.tensor(x, dtype=dtype), torch.tensor(y)


def natural_crops(n: int = 512, seed: int = 0, shape: tuple[int, int, int] = (3, 32, 32), classes: int = 10,
                  dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """Natural-image inputs that ship with scikit-learn: random ``shape`` crops of its two sample photographs
    (``load_sample_images``: china.jpg and flower.jpg, 427x640 RGB), optionally taken every 2nd pixel to cover a
    wider field, scaled to k/255 like CIFAR's 8-bit pixels (so ties come only from equal 8-bit values, as in real
    data, not from synthetic plateaus). Label: which photograph, and which of ``classes // 2`` horizontal bands
    the crop's centre falls in (learnable from the crop)."""
    from sklearn.datasets import load_sample_images

    c, h, w = shape
    if c not in (1, 3):
        raise NsverifyError(f"natural_crops: {c} channels; use 1 (grey) or 3 (RGB)")
    if n < 1 or h < 1 or w < 1 or classes < 2:
        raise NsverifyError(f"natural_crops: n={n}, shape={shape}, classes={classes}; use positive sizes and "
                            "at least 2 classes")
    images = [np.asarray(im) for im in load_sample_images().images]
    bands = max(1, classes // 2)
    g = np.random.default_rng(seed)
    x = np.empty((n, c, h, w), dtype=np.float64)
    y = np.empty(n, dtype=np.int64)
    for i in range(n):
        k = int(g.integers(len(images)))
        img = images[k]
        step = int(g.integers(1, 3))
        H, W = img.shape[0], img.shape[1]
        if (h - 1) * step + 1 > H or (w - 1) * step + 1 > W:
            step = 1
        if h > H or w > W:
            raise NsverifyError(f"natural_crops: a {h}x{w} crop does not fit the {H}x{W} sample images")
        r = int(g.integers(0, H - (h - 1) * step))
        q = int(g.integers(0, W - (w - 1) * step))
        crop = img[r:r + (h - 1) * step + 1:step, q:q + (w - 1) * step + 1:step, :].astype(np.float64) / 255.0
        x[i] = crop.transpose(2, 0, 1) if c == 3 else crop.mean(axis=2, keepdims=True).transpose(2, 0, 1)
        centre = q + (w - 1) * step / 2
        y[i] = (k * bands + min(bands - 1, int(centre / W * bands))) % classes
    return torch.tensor(x, dtype=dtype), torch.tensor(y)


@functools.lru_cache(maxsize=1)
def _english_text() -> bytes:
    """The English prose that ships with scikit-learn: its dataset descriptions (``sklearn/datasets/descr/*.rst``),
    concatenated in name order, whitespace runs collapsed to one space."""
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    folder = Path(spec.submodule_search_locations[0]) / "datasets" / "descr" if spec else None
    if folder is None or not folder.is_dir():
        raise DataNotFoundError("text_tokens: scikit-learn's dataset descriptions (sklearn/datasets/descr/*.rst) "
                                "were not found; install scikit-learn (pip install scikit-learn)")
    text = b" ".join(p.read_bytes() for p in sorted(folder.glob("*.rst")))
    return b" ".join(text.split())


def text_tokens(n: int = 2, seq: int = 32, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` windows of ``seq + 1`` consecutive byte tokens (ids 0..255) of real English text (:func:`_english_text`)
    at random offsets: ``(tokens, next_tokens)``, both (n, seq) ``torch.long``, ``next_tokens`` shifted by one
    (a language model's inputs and targets)."""
    if n < 1 or seq < 1:
        raise NsverifyError(f"text_tokens: n={n}, seq={seq}; give positive sizes")
    text = np.frombuffer(_english_text(), dtype=np.uint8)
    if seq + 1 > len(text):
        raise NsverifyError(f"text_tokens: seq={seq} is longer than the text ({len(text)} bytes)")
    starts = np.random.default_rng(seed).integers(0, len(text) - seq, size=n)
    windows = np.stack([text[s:s + seq + 1] for s in starts]).astype(np.int64)
    return torch.tensor(windows[:, :-1]), torch.tensor(windows[:, 1:])


def _find(root: Path, names: list[str], what: str, hint: str) -> Path:
    for name in names:
        for cand in (root / name, root / (name + ".gz")):
            if cand.exists():
                return cand
    raise DataNotFoundError(
        f"{what} not found under {str(root)!r} (looked for {', '.join(names)}[.gz]). nsverify does not download "
        f"data: {hint}, or use the built-in datasets 'digits28' / 'plateaus'.")


def load_mnist(root: str | Path, train: bool = True, dtype=torch.float32):
    """MNIST from the original idx files in ``root`` (as a user already has them), scaled to [0, 1]."""
    root = Path(root)
    pre = "train" if train else "t10k"
    hint = "put train-images-idx3-ubyte and train-labels-idx1-ubyte (optionally .gz) in that directory"
    img = _find(root, [f"{pre}-images-idx3-ubyte", f"{pre}-images.idx3-ubyte"], "MNIST images", hint)
    lab = _find(root, [f"{pre}-labels-idx1-ubyte", f"{pre}-labels.idx1-ubyte"], "MNIST labels", hint)
    op = lambda p: gzip.open(p, "rb") if p.suffix == ".gz" else open(p, "rb")
    with op(img) as fh:
        raw = fh.read()
    x = np.frombuffer(raw, np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with op(lab) as fh:
        y = np.frombuffer(fh.read(), np.uint8, offset=8)
    return torch.tensor(x / 255.0, dtype=dtype), torch.tensor(y.astype(np.int64))


def load_cifar10(root: str | Path, train: bool = True, dtype=torch.float32):
    """CIFAR-10 from the python pickles (``cifar-10-batches-py``) in ``root``, scaled to [0, 1]."""
    root = Path(root)
    base = root / "cifar-10-batches-py" if (root / "cifar-10-batches-py").is_dir() else root
    names = [f"data_batch_{i}" for i in range(1, 6)] if train else ["test_batch"]
    hint = "extract cifar-10-python.tar.gz there (the cifar-10-batches-py directory)"
    xs, ys = [], []
    for name in names:
        path = base / name
        if not path.exists():
            _find(base, [name], "CIFAR-10 batch", hint)
        with open(path, "rb") as fh:
            d = pickle.load(fh, encoding="latin1")
        xs.append(np.asarray(d["data"], np.uint8).reshape(-1, 3, 32, 32))
        ys.append(np.asarray(d["labels"], np.int64))
    return torch.tensor(np.concatenate(xs) / 255.0, dtype=dtype), torch.tensor(np.concatenate(ys))


DATASETS = ("digits28", "plateaus", "natural", "mnist", "cifar10")


def get_dataset(name: str, root: str | Path | None = None, n: int = 512, seed: int = 0,
                dtype=torch.float32):
    """(x, y) for one of :data:`DATASETS`; ``root`` is required for the real ones."""
    if name == "digits28":
        return digits28(dtype)
    if name == "plateaus":
        return plateaus(n, seed, dtype=dtype)
    if name == "natural":
        return natural_crops(n, seed, dtype=dtype)
    if name in ("mnist", "cifar10"):
        if root is None:
            raise DataNotFoundError(f"dataset {name!r} needs --data-root DIR pointing at files you already have; "
                                    f"nsverify does not download data (built-in: digits28, plateaus, natural).")
        return (load_mnist if name == "mnist" else load_cifar10)(root, dtype=dtype)
    raise NsverifyError(f"unknown dataset {name!r}; choose from {', '.join(DATASETS)}.")

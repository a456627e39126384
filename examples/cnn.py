"""A small convolutional network on generated images: a model factory and a batch factory for tcbench.

    import tcbench as tc
    spec = tc.JobSpec(model="examples.cnn:small_cnn", dataset="examples.cnn:images", batch_size=32, steps=40)
    tc.compare(spec, backends=["inductor"]).summary()

(run from the repository's root, or put this folder on ``sys.path``). Nothing here knows tcbench: the model's
``forward(**batch)`` returns the loss, the batch factory yields dicts of tensors.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

WIDTHS = {"tiny": (8, 16), "small": (32, 64), "base": (64, 128)}
CLASSES = 4
IMAGE = 32


class SmallCNN(nn.Module):
    def __init__(self, widths: tuple[int, int], classes: int = CLASSES, dropout: float = 0.0) -> None:
        super().__init__()
        a, b = widths
        self.conv1 = nn.Conv2d(3, a, 3, padding=1)
        self.conv2 = nn.Conv2d(a, b, 3, padding=1)
        self.norm = nn.BatchNorm2d(b)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(b, classes)

    def forward(self, pixels: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(pixels)), 2)
        x = F.relu(self.norm(self.conv2(x)))
        logits = self.head(self.drop(x.mean(dim=(2, 3))))
        return logits if labels is None else F.cross_entropy(logits, labels)


def small_cnn(size: str = "tiny", dropout: float | None = None) -> SmallCNN:
    """The model factory: ``size`` is tiny / small / base."""
    if size not in WIDTHS:
        raise ValueError(f"size={size!r} is not allowed; allowed: {', '.join(WIDTHS)}")
    return SmallCNN(WIDTHS[size], dropout=dropout or 0.0)


def images(batch_size: int, seed: int = 0, split: str = "train", image: int = IMAGE):
    """The batch factory: endless batches of learnable 3 x image x image pictures in CLASSES classes (the class
    sets the mean colour of one channel and a stripe; noise on top). ``eval`` draws from another stream."""
    g = torch.Generator().manual_seed(seed * 2 + (split == "eval"))
    stripes = torch.zeros(CLASSES, 1, image, image)
    for k in range(CLASSES):
        stripes[k, 0, :, k * image // CLASSES:(k + 1) * image // CLASSES] = 1.0
    while True:
        labels = torch.randint(0, CLASSES, (batch_size,), generator=g)
        pixels = 0.8 * torch.randn(batch_size, 3, image, image, generator=g)
        pixels[:, :1] += stripes[labels]
        pixels[torch.arange(batch_size), labels % 3] += 0.5
        yield {"pixels": pixels, "labels": labels}

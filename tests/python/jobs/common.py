"""What the test jobs share: small models, each worker's data, results."""

import json
import os

import torch

IN, HIDDEN, CLASSES = 12, 24, 3


def setup_torch():
    torch.set_num_threads(1)


class Net(torch.nn.Module):
    """A small classifier. With unused=True it has a layer the forward pass
    never touches; with bn=True a BatchNorm layer (running statistics)."""

    def __init__(self, unused=False, bn=False, hidden=HIDDEN):
        super().__init__()
        self.fc1 = torch.nn.Linear(IN, hidden)
        self.bn = torch.nn.BatchNorm1d(hidden) if bn else None
        self.fc2 = torch.nn.Linear(hidden, CLASSES)
        self.unused = torch.nn.Linear(hidden, hidden) if unused else None

    def forward(self, x):
        h = self.fc1(x)
        if self.bn is not None:
            h = self.bn(h)
        return self.fc2(torch.relu(h))


_TRUE_W = torch.Generator().manual_seed(7)
_W = torch.randn(IN, CLASSES, generator=_TRUE_W)


def batch(worker, step, n=32):
    """Worker's data for a step: a fixed linear rule, labels from argmax."""
    g = torch.Generator().manual_seed(1000 * worker + step + 1)
    x = torch.randn(n, IN, generator=g)
    return x, (x @ _W).argmax(dim=1)


def test_set(n=512):
    return batch(99, 99, n)


def accuracy(model, data):
    x, y = data
    was = model.training
    model.eval()
    with torch.no_grad():
        acc = float((model(x).argmax(dim=1) == y).float().mean())
    model.train(was)
    return acc


def flat(tensors):
    return torch.cat([t.detach().reshape(-1).double() for t in tensors])


def save(out_dir, worker, results):
    path = os.path.join(out_dir, f"worker{worker}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(results, f, indent=1)
    os.replace(path + ".tmp", path)

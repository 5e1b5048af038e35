"""Module classes the export tests pickle; importable by the exporter's subprocess."""
from torch import nn


class NotSequential(nn.Module):
    """Children look sequential, but forward adds a skip connection the walk cannot see."""

    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(16, 16)
        self.act = nn.Tanh()

    def forward(self, x):
        x = self.flatten(x)
        return self.act(self.fc(x)) + x


class Wrapped(nn.Module):
    """A module holding a Sequential inside, as model classes often do."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(2 * 3 * 3, 5), nn.Softmax(dim=1))

    def forward(self, x):
        return self.head(self.features(x))

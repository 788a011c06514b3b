"""Modules the exporter's tests export (`crates/cli/tests/torch_export.rs`): each function
returns `(module, example input)` under a fixed seed, float64."""
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


def bn(c):
    m = nn.BatchNorm2d(c)
    with torch.no_grad():
        m.weight.copy_(1 + 0.3 * torch.randn(c))
        m.bias.copy_(0.2 * torch.randn(c))
        m.running_mean.copy_(0.5 * torch.randn(c))
        m.running_var.copy_(0.5 + torch.rand(c))
    return m


def mlp():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 3),
                         nn.LogSoftmax(dim=1)).eval(), torch.randn(4, 6)


def cnn():
    torch.manual_seed(2)
    return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), bn(4), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(4, 4, 3, stride=2, padding=1), nn.ReLU(),
                         nn.AvgPool2d(2, stride=1, padding=1), nn.Flatten(),
                         nn.Linear(4 * 3 * 3, 5)).eval(), torch.randn(2, 2, 8, 8)


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 3, 3, padding=1)
        self.b1 = bn(3)
        self.c2 = nn.Conv2d(3, 3, 3, padding=1)
        self.b2 = bn(3)

    def forward(self, x):
        return F.relu(x + self.b2(self.c2(F.relu(self.b1(self.c1(x)))))).mean(dim=(2, 3))


def residual():
    torch.manual_seed(3)
    return Residual().eval(), torch.randn(2, 3, 5, 5)


class Encoder(nn.Module):
    """A pre-norm transformer encoder block: one head, layer norm, GELU MLP, two residuals."""

    def __init__(self, d=8, hidden=16):
        super().__init__()
        self.n1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.n2 = nn.LayerNorm(d)
        self.up = nn.Linear(d, hidden)
        self.down = nn.Linear(hidden, d)
        self.d = d

    def forward(self, x):
        h = self.qkv(self.n1(x))
        q, k, v = h[..., : self.d], h[..., self.d: 2 * self.d], h[..., 2 * self.d:]
        a = torch.softmax(q @ k.transpose(-2, -1) / self.d ** 0.5, dim=-1) @ v
        x = x + self.proj(a)
        return x + self.down(F.gelu(self.up(self.n2(x))))


def encoder():
    torch.manual_seed(4)
    return Encoder().eval(), torch.randn(2, 5, 8)


EXAMPLES = {"mlp": mlp, "cnn": cnn, "residual": residual, "encoder": encoder}


class Unsupported(nn.Module):
    """Four problems: three ops without an IR kind and one attribute value the IR lacks."""

    def forward(self, x):
        y = torch.cumsum(x, dim=3)  # PROBLEM cumsum
        y = torch.erfinv(torch.tanh(y))  # PROBLEM erfinv
        y = F.max_pool2d(y, 2, ceil_mode=True)  # PROBLEM pool with ceil_mode=True
        return torch.sort(y, dim=-1).values  # PROBLEM sort


def unsupported():
    torch.manual_seed(5)
    return Unsupported().eval(), torch.randn(1, 2, 5, 5)

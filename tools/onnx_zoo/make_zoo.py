"""Builds the ONNX model zoo fixtures of crates/onnx/tests/zoo/ (issue 15's acceptance).

Each model is built in PyTorch under a fixed seed, exported with the TorchScript exporter
(`torch.onnx.export(..., dynamo=False)`), and run by onnxruntime and by PyTorch. For each model
NAME the script writes:

- `NAME.onnx`: the model;
- `NAME.safetensors`: `input`, `seed` (the output cotangent, random, not ones), `output_ort`
  (onnxruntime), `output_torch`, `grad_input` and `grad.<parameter name>` for every parameter
  (PyTorch autograd under `seed`), all in the model's dtype; metadata `dtype` ("f64" or
  "f32"). An f32 model also has `output_torch_f64`, `grad_input_f64` and
  `grad_f64.<parameter name>`: the same model and input (exactly) run by PyTorch in float64.

A model over token ids (`gpt`) takes an INT64 `input` and has no `grad_input`.

A model is exported in float64 when onnxruntime runs it in float64, else in float32 (ORT has no
float64 `Erf`, which its `Gelu` expands to). Every parameter must appear as an ONNX initializer
under its PyTorch name (the test maps gradients by name; the script fails otherwise).

Run from the repository root:

    pip install torch onnx onnxruntime safetensors numpy
    python tools/onnx_zoo/make_zoo.py            # writes crates/onnx/tests/zoo/
    python tools/onnx_zoo/make_zoo.py gpt        # only the models named

Made with torch 2.15, onnx 1.23.2, onnxruntime 1.32.0.
"""

import copy
import io
import math
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import torch
from safetensors.numpy import save_file

OUT = os.environ.get("ZOO_OUT") or os.path.join(os.path.dirname(__file__), "..", "..", "crates", "onnx", "tests", "zoo")
OPSET = 20


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.fc2 = torch.nn.Linear(8, 8)
        self.fc3 = torch.nn.Linear(8, 3)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = torch.sigmoid(self.fc2(h)) * torch.tanh(h)
        return torch.log_softmax(self.fc3(h), dim=1)


class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.conv2 = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        h = torch.nn.functional.max_pool2d(torch.relu(self.conv1(x)), 2)
        h = self.bn(h)  # after the pool: the exporter does not fold it into the convolution
        h = torch.nn.functional.avg_pool2d(self.conv2(h), 3, stride=1, padding=1)
        h = torch.nn.functional.adaptive_avg_pool2d(h, 1).flatten(1)
        return torch.softmax(self.fc(h), dim=-1)


class DigitsCnn(torch.nn.Module):
    """A classifier of the embedded 8x8 digits as a user would export it (batch 1, fixed):
    the model `torchlean train --from` fine-tunes in the README and its tests."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        h = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.fc(torch.flatten(self.bn(h), 1))


class Residual(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 3, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(3)
        self.conv2 = torch.nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x):
        h = self.bn(torch.relu(self.conv1(x)))
        h = self.conv2(h)
        return torch.relu(h + x) - torch.clamp(x, -0.5, 0.5) / 2.0


class Encoder(torch.nn.Module):
    """One pre-norm transformer encoder block (two heads) with fixed sizes."""

    def __init__(self, b=2, t=4, d=8, heads=2):
        super().__init__()
        self.b, self.t, self.d, self.h = b, t, d, heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.q = torch.nn.Linear(d, d)
        self.k = torch.nn.Linear(d, d)
        self.v = torch.nn.Linear(d, d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.ff1 = torch.nn.Linear(d, 2 * d)
        self.ff2 = torch.nn.Linear(2 * d, d)

    def heads(self, z):
        return z.reshape(self.b, self.t, self.h, self.d // self.h).transpose(1, 2)

    def forward(self, x):
        y = self.ln1(x)
        q, k, v = self.heads(self.q(y)), self.heads(self.k(y)), self.heads(self.v(y))
        att = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(self.d // self.h), dim=-1)
        o = (att @ v).transpose(1, 2).reshape(self.b, self.t, self.d)
        x = x + self.proj(o)
        return x + self.ff2(torch.nn.functional.gelu(self.ff1(self.ln2(x))))


class Gpt(torch.nn.Module):
    """A nanoGPT-style decoder (two blocks, four heads of 4, tied embeddings, a causal mask
    filled with -inf, exact GELU) over INT64 token ids: what `torch.onnx.export` makes of a GPT.
    The head size is 4 so that the exported f32 scale 1/sqrt(4) is exact (the float64 PyTorch
    run it is compared with at 1e-9 uses the exact value)."""

    def __init__(self, vocab=11, block=8, d=16, heads=4, layers=2):
        super().__init__()
        self.heads = heads
        self.wte = torch.nn.Embedding(vocab, d)
        self.wpe = torch.nn.Embedding(block, d)
        self.blocks = torch.nn.ModuleList([GptBlock(d, heads, block) for _ in range(layers)])
        self.ln_f = torch.nn.LayerNorm(d)
        self.lm_head = torch.nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as nanoGPT

    def forward(self, idx):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        return self.lm_head(self.ln_f(x))


class GptBlock(torch.nn.Module):
    def __init__(self, d, heads, block):
        super().__init__()
        self.heads = heads
        self.ln_1 = torch.nn.LayerNorm(d)
        self.c_attn = torch.nn.Linear(d, 3 * d)
        self.c_proj = torch.nn.Linear(d, d)
        self.ln_2 = torch.nn.LayerNorm(d)
        self.c_fc = torch.nn.Linear(d, 4 * d)
        self.c_fc_proj = torch.nn.Linear(4 * d, d)
        self.register_buffer("mask", torch.tril(torch.ones(block, block)), persistent=False)

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        hd = c // self.heads
        q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.mask[:t, :t] == 0, float("-inf"))
        y = (torch.softmax(att, dim=-1) @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.c_proj(y)
        return x + self.c_fc_proj(torch.nn.functional.gelu(self.c_fc(self.ln_2(x))))


def conv_bn(cin, cout, k, stride=1, groups=1, act=None):
    """Conv (no bias), batch norm, and an activation (torchvision's `Conv2dNormActivation`)."""
    layers = [
        torch.nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
        torch.nn.BatchNorm2d(cout),
    ]
    if act is not None:
        layers.append(act())
    return torch.nn.Sequential(*layers)


class InvertedResidual(torch.nn.Module):
    """MobileNet-V2's block (ReLU6, no squeeze-and-excitation) and EfficientNet's MBConv
    (SiLU, squeeze-and-excitation): a 1x1 expansion (none when `expand` is 1), a depthwise
    `k`x`k` convolution, the optional squeeze-and-excitation, a linear 1x1 projection, the
    identity added when the shapes allow (stochastic depth is the identity in inference)."""

    def __init__(self, cin, cout, stride, expand, k=3, act=torch.nn.ReLU6, se=False):
        super().__init__()
        hidden = cin * expand
        layers = [] if expand == 1 else [conv_bn(cin, hidden, 1, act=act)]
        layers.append(conv_bn(hidden, hidden, k, stride, groups=hidden, act=act))
        if se:
            layers.append(SqueezeExcitation(hidden, max(1, cin // 4)))
        layers.append(conv_bn(hidden, cout, 1))
        self.block = torch.nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.block(x) if self.residual else self.block(x)


class Classifier(torch.nn.Module):
    """torchvision's classifier layout: a feature stack, global average pool, dropout, linear."""

    def __init__(self, features, width, classes=5):
        super().__init__()
        self.features = torch.nn.Sequential(*features)
        self.classifier = torch.nn.Sequential(torch.nn.Dropout(0.2), torch.nn.Linear(width, classes))

    def forward(self, x):
        h = torch.nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(h, 1))


def mobilenet_v2():
    """torchvision's MobileNet-V2 at reduced width and depth: the same ops (stem, inverted
    residuals with and without the identity, 1x1 head, global pool, dropout, linear)."""
    return Classifier([
        conv_bn(3, 8, 3, 2, act=torch.nn.ReLU6),
        InvertedResidual(8, 8, 1, 1),
        InvertedResidual(8, 12, 2, 4),
        InvertedResidual(12, 12, 1, 4),
        conv_bn(12, 16, 1, act=torch.nn.ReLU6),
    ], 16)


class SqueezeExcitation(torch.nn.Module):
    def __init__(self, c, squeezed):
        super().__init__()
        self.fc1 = torch.nn.Conv2d(c, squeezed, 1)
        self.fc2 = torch.nn.Conv2d(squeezed, c, 1)

    def forward(self, x):
        s = torch.nn.functional.adaptive_avg_pool2d(x, 1)
        s = torch.sigmoid(self.fc2(torch.nn.functional.silu(self.fc1(s))))
        return x * s


def mb_conv(cin, cout, k, stride, expand):
    """EfficientNet's MBConv."""
    return InvertedResidual(cin, cout, stride, expand, k, act=torch.nn.SiLU, se=True)


def efficientnet_b0():
    """torchvision's EfficientNet-B0 at reduced width and depth: the same ops."""
    return Classifier([
        conv_bn(3, 8, 3, 2, act=torch.nn.SiLU),
        mb_conv(8, 8, 3, 1, 1),
        mb_conv(8, 12, 5, 2, 4),
        mb_conv(12, 12, 3, 1, 4),
        conv_bn(12, 20, 1, act=torch.nn.SiLU),
    ], 20)


class LayerNorm2d(torch.nn.LayerNorm):
    """torchvision's channels-first layer norm: permute, normalise, permute back."""

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = torch.nn.functional.layer_norm(x, self.normalized_shape, self.weight, self.bias,
                                           self.eps)
        return x.permute(0, 3, 1, 2)


class CnBlock(torch.nn.Module):
    """ConvNeXt's block: 7x7 depthwise, channels-last layer norm, MLP (GELU), layer scale,
    the identity added."""

    def __init__(self, c):
        super().__init__()
        self.dwconv = torch.nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = torch.nn.LayerNorm(c, eps=1e-6)
        self.pw1 = torch.nn.Linear(c, 4 * c)
        self.pw2 = torch.nn.Linear(4 * c, c)
        self.layer_scale = torch.nn.Parameter(torch.rand(c, 1, 1) * 0.5 + 0.25)

    def forward(self, x):
        h = self.dwconv(x).permute(0, 2, 3, 1)
        h = self.pw2(torch.nn.functional.gelu(self.pw1(self.norm(h))))
        return x + self.layer_scale * h.permute(0, 3, 1, 2)


class ConvNeXtTiny(torch.nn.Module):
    """torchvision's ConvNeXt-Tiny at reduced width and depth: patchify stem, blocks,
    downsampling (layer norm, 2x2 stride-2 conv), global pool, layer norm, linear."""

    def __init__(self, classes=5):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 8, 4, stride=4)
        self.stem_norm = LayerNorm2d(8, eps=1e-6)
        self.stage1 = CnBlock(8)
        self.down_norm = LayerNorm2d(8, eps=1e-6)
        self.down = torch.nn.Conv2d(8, 16, 2, stride=2)
        self.stage2 = CnBlock(16)
        self.head_norm = torch.nn.LayerNorm(16, eps=1e-6)
        self.head = torch.nn.Linear(16, classes)

    def forward(self, x):
        h = self.stage1(self.stem_norm(self.stem(x)))
        h = self.stage2(self.down(self.down_norm(h)))
        h = torch.flatten(torch.nn.functional.adaptive_avg_pool2d(h, 1), 1)
        return self.head(self.head_norm(h))


def export(model, x):
    f = io.BytesIO()
    torch.onnx.export(
        model, (x,), f, dynamo=False, opset_version=OPSET, input_names=["x"],
        output_names=["y"], do_constant_folding=False,
    )
    return f.getvalue()


def ort_run(data, x):
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x.numpy()})[0]


def torch_grads(m, x, seed):
    """Output, input gradient and parameter gradients under cotangent `seed` (None: output
    only). Integer input (token ids) has no gradient: `None`."""
    xg = x.clone().requires_grad_(True) if x.is_floating_point() else x
    m.zero_grad()
    out = m(xg)
    if seed is None:
        return out, None, None
    out.backward(seed)
    grads = {n: p.grad.numpy().copy() for n, p in m.named_parameters()}
    grad_x = xg.grad.numpy() if x.is_floating_point() else None
    return out.detach().numpy(), grad_x, grads


def build(name, make, input_shape, vocab=None):
    torch.manual_seed(15)
    model = make()
    for mod in model.modules():  # non-trivial running statistics for batch norm in eval mode
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
            torch.nn.init.uniform_(mod.weight, 0.5, 1.5)
            torch.nn.init.uniform_(mod.bias, -0.5, 0.5)
        if isinstance(mod, torch.nn.LayerNorm):  # distinct values: the exporter merges equal ones
            torch.nn.init.uniform_(mod.weight, 0.5, 1.5)
            torch.nn.init.uniform_(mod.bias, -0.5, 0.5)
    model.eval()
    if vocab is None:
        x64 = torch.randn(*input_shape, dtype=torch.float64)
    else:  # token ids in [0, vocab)
        x64 = torch.randint(0, vocab, input_shape, dtype=torch.long)
    for dtype, tag in ((torch.float64, "f64"), (torch.float32, "f32")):
        m = model.to(dtype)
        x = x64.to(dtype) if vocab is None else x64
        data = export(m, x)
        try:
            out_ort = ort_run(data, x)
        except Exception as e:  # noqa: BLE001 - onnxruntime lacks a kernel at this dtype
            print(f"{name}: onnxruntime cannot run it in {tag} ({type(e).__name__}); trying f32")
            continue
        break
    else:
        sys.exit(f"{name}: onnxruntime runs it in neither dtype")
    proto = onnx.load_from_string(data)
    inits = {i.name for i in proto.graph.initializer}
    missing = [n for n, _ in m.named_parameters() if n not in inits]
    if missing:
        sys.exit(f"{name}: parameters not exported under their names: {missing}")
    out, grad_x, grads = torch_grads(m, x, None)
    seed = torch.randn(out.shape, dtype=torch.float64).to(dtype)
    out, grad_x, grads = torch_grads(m, x, seed)
    tensors = {
        "input": x.numpy(),
        "seed": seed.numpy(),
        "output_ort": np.ascontiguousarray(out_ort),
        "output_torch": out,
    }
    if grad_x is not None:
        tensors["grad_input"] = grad_x
    tensors.update({"grad." + n: g for n, g in grads.items()})
    if dtype == torch.float32:
        # the same model (its f32 weights, exactly) in float64: what our f64 engines must match
        m64 = copy.deepcopy(m).double()
        x64 = x.double() if vocab is None else x
        out, grad_x, grads = torch_grads(m64, x64, seed.double())
        tensors["output_torch_f64"] = out
        if grad_x is not None:
            tensors["grad_input_f64"] = grad_x
        tensors.update({"grad_f64." + n: g for n, g in grads.items()})
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, name + ".onnx"), "wb") as fh:
        fh.write(data)
    save_file(tensors, os.path.join(OUT, name + ".safetensors"), metadata={"dtype": tag})
    ops = sorted({n.op_type for n in proto.graph.node})
    err = float(np.max(np.abs(out_ort - tensors["output_torch"])))
    size = os.path.getsize(os.path.join(OUT, name + ".safetensors"))
    print(f"{name}: {tag}, {len(data)} + {size} bytes, ops {ops}, |ort - torch| = {err:.3g}")


MODELS = {
    "mlp": lambda: build("mlp", Mlp, (4, 6)),
    "cnn": lambda: build("cnn", Cnn, (2, 2, 8, 8)),
    "residual": lambda: build("residual", Residual, (2, 3, 5, 5)),
    "digits_cnn": lambda: build("digits_cnn", DigitsCnn, (1, 1, 8, 8)),
    "encoder": lambda: build("encoder", Encoder, (2, 4, 8)),
    "gpt": lambda: build("gpt", Gpt, (2, 8), vocab=11),
    "mobilenet_v2": lambda: build("mobilenet_v2", mobilenet_v2, (2, 3, 16, 16)),
    "efficientnet_b0": lambda: build("efficientnet_b0", efficientnet_b0, (2, 3, 16, 16)),
    "convnext_tiny": lambda: build("convnext_tiny", ConvNeXtTiny, (2, 3, 32, 32)),
}


def main():
    # `make_zoo.py [NAME ...]`: the models named (default: all)
    for name in sys.argv[1:] or MODELS:
        MODELS[name]()


if __name__ == "__main__":
    main()

"""TorchLean's deterministic random kinds as PyTorch custom ops, so a module that uses them
exports to `rand_uniform` / `bernoulli_mask` nodes and PyTorch evaluates them the same way;
and `causal_attention` (nanoGPT's attention on packed projections), which PyTorch writes as
several ops around `scaled_dot_product_attention`, as one custom op that exports to one
`causal_attention` node and PyTorch evaluates (and differentiates) through those ops; and
`conv2d_relu` (what our compiled graphs fuse a convolution and its ReLU into), which exports
to one `conv2d_relu` node and PyTorch evaluates as `F.relu(F.conv2d(...))`.

The values follow SPEC's stream (`crates/spec/src/ops/random.rs`): SplitMix64 keyed by
`(seed, key)` (`stream = splitmix64(seed ^ splitmix64(key))`), element `i` is the top 24 bits
of `splitmix64(stream + i)` over 2^24. The IR
uses the node id as the key, so a module passes the id its node will get (`torch_export`
refuses a key that is not the node's id).
"""
import torch
import torch.nn.functional as F

MASK = (1 << 64) - 1


def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def uniform_values(seed, key, n):
    stream = splitmix64((seed ^ splitmix64(key)) & MASK)
    return [(splitmix64((stream + i) & MASK) >> 40) / float(1 << 24) for i in range(n)]


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


@torch.library.custom_op("torchlean::rand_uniform", mutates_args=())
def rand_uniform(like: torch.Tensor, shape: list[int], seed: int, key: int) -> torch.Tensor:
    """Uniform `[0, 1)` values of `shape`; `like` only gives the dtype (no gradient flows)."""
    data = uniform_values(seed, key, _numel(shape))
    return torch.tensor(data, dtype=like.dtype).reshape(shape)


@rand_uniform.register_fake
def _(like, shape, seed, key):
    return like.new_empty(shape)


@torch.library.custom_op("torchlean::bernoulli_mask", mutates_args=())
def bernoulli_mask(keep_prob: torch.Tensor, shape: list[int], seed: int, key: int) -> torch.Tensor:
    """1 where `keep_prob > u`, else 0 (`keep_prob` a scalar tensor)."""
    u = torch.tensor(uniform_values(seed, key, _numel(shape)), dtype=keep_prob.dtype).reshape(shape)
    return (keep_prob > u).to(keep_prob.dtype)


@bernoulli_mask.register_fake
def _(keep_prob, shape, seed, key):
    return keep_prob.new_empty(shape)


def _no_context(ctx, inputs, output):
    pass


def _no_gradient(ctx, grad):
    # the values do not depend on `like` / `keep_prob` differentiably (the IR's VJP is zero)
    return None, None, None, None


rand_uniform.register_autograd(_no_gradient, setup_context=_no_context)
bernoulli_mask.register_autograd(_no_gradient, setup_context=_no_context)


def causal_attention_reference(qkv, heads):
    """nanoGPT's causal self-attention between c_attn and c_proj, in PyTorch's own ops (the
    helper `causal_attention` of `crates/spec/src/ops/torch.rs` that `export-torch` writes is
    this function): qkv [..., T, 3C] holds queries, keys and values side by side, each of the
    `heads` heads hd = C/heads consecutive columns of each; the output [..., T, C]."""
    *lead, t, c3 = qkv.shape
    c = c3 // 3
    q, k, v = (p.reshape(*lead, t, heads, c // heads).transpose(-3, -2)
               for p in qkv.split(c, dim=-1))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(-3, -2).reshape(*lead, t, c)


@torch.library.custom_op("torchlean::causal_attention", mutates_args=())
def causal_attention(qkv: torch.Tensor, heads: int) -> torch.Tensor:
    """TorchLean's `causal_attention` kind: `causal_attention_reference` as one op."""
    return causal_attention_reference(qkv, heads).clone()


@causal_attention.register_fake
def _(qkv, heads):
    return qkv.new_empty(list(qkv.shape[:-1]) + [qkv.shape[-1] // 3])


def _attention_context(ctx, inputs, output):
    qkv, heads = inputs
    ctx.save_for_backward(qkv)
    ctx.heads = heads


def _attention_gradient(ctx, grad):
    # PyTorch's own gradient of the composition, recomputed from the saved operand
    (qkv,) = ctx.saved_tensors
    with torch.enable_grad():
        x = qkv.detach().requires_grad_(True)
        (dx,) = torch.autograd.grad(causal_attention_reference(x, ctx.heads), x, grad)
    return dx, None


causal_attention.register_autograd(_attention_gradient, setup_context=_attention_context)


def conv2d_relu_reference(x, weight, bias, stride, padding, dilation, groups):
    """`conv2d_relu`: the ReLU of the convolution, in PyTorch's own ops."""
    return F.relu(F.conv2d(x, weight, bias, stride=stride, padding=padding, dilation=dilation,
                           groups=groups))


@torch.library.custom_op("torchlean::conv2d_relu", mutates_args=())
def conv2d_relu(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, stride: int,
                padding: int, dilation: int, groups: int) -> torch.Tensor:
    """TorchLean's `conv2d_relu` kind: `conv2d_relu_reference` as one op."""
    return conv2d_relu_reference(input, weight, bias, stride, padding, dilation, groups).clone()


@conv2d_relu.register_fake
def _(input, weight, bias, stride, padding, dilation, groups):
    return conv2d_relu_reference(input, weight, bias, stride, padding, dilation, groups)


def _conv_relu_context(ctx, inputs, output):
    x, weight, bias, *attrs = inputs
    ctx.save_for_backward(x, weight, bias)
    ctx.attrs = attrs


def _conv_relu_gradient(ctx, grad):
    # PyTorch's own gradient of the composition, recomputed from the saved operands
    with torch.enable_grad():
        operands = [t.detach().requires_grad_(True) for t in ctx.saved_tensors]
        y = conv2d_relu_reference(*operands, *ctx.attrs)
        dx, dw, db = torch.autograd.grad(y, operands, grad)
    return dx, dw, db, None, None, None, None


conv2d_relu.register_autograd(_conv_relu_gradient, setup_context=_conv_relu_context)

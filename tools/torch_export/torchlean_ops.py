"""TorchLean's deterministic random kinds as PyTorch custom ops, so a module that uses them
exports to `rand_uniform` / `bernoulli_mask` nodes and PyTorch evaluates them the same way.

The values follow SPEC's stream (`crates/spec/src/ops/random.rs`): SplitMix64 keyed by
`(seed, key)` (`stream = splitmix64(seed ^ splitmix64(key))`), element `i` is the top 24 bits
of `splitmix64(stream + i)` over 2^24. The IR
uses the node id as the key, so a module passes the id its node will get (`torch_export`
refuses a key that is not the node's id).
"""
import torch

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

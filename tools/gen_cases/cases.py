"""The generated conformance cases: one small function per case, returning `(module, input)`.

Each runs under `torch.manual_seed(crc32(name))` with float64 as the default dtype, so its
parameters and inputs are fixed by its name. Tensors stay small (CI runs every case on every
engine several times). Inputs keep clear of the points where PyTorch's and the IR's rules
could disagree by choice of subgradient (ties, exact kinks) unless the case is about them.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from registry import case
from torchlean_ops import bernoulli_mask, causal_attention, conv2d_relu, rand_uniform


class Fn(nn.Module):
    """A module from a function `f(self, x)`, with named parameters, buffers and submodules."""

    def __init__(self, f, params=None, buffers=None, **mods):
        super().__init__()
        self.f = f
        for k, v in (params or {}).items():
            self.register_parameter(k, nn.Parameter(v))
        for k, v in (buffers or {}).items():
            self.register_buffer(k, v)
        for k, m in mods.items():
            self.add_module(k, m)

    def forward(self, x):
        return self.f(self, x)


def randn(*shape):
    return torch.randn(*shape)


def away_from(t, points, gap=0.05):
    """`t` with every element at least `gap` from each of `points` (kinks, clamp bounds)."""
    for p in points:
        d = t - p
        t = torch.where(d.abs() < gap, p + gap * torch.sign(d + (d == 0)), t)
    return t


def nan_and_signed_zeros(x):
    """`x` (rank 2, at least 2×4) with a NaN at [0, 1], 0 at [1, 2] and -0 at [1, 3]."""
    x[0, 1] = math.nan
    x[1, 2] = 0.0
    x[1, 3] = -0.0
    return x


# --- linear layers and MLPs --------------------------------------------------------------


@case()
def mlp_tanh_sigmoid():
    return nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3), nn.Sigmoid()), randn(3, 5)


@case(dtype="f32")
def mlp_gelu_f32():
    return nn.Sequential(nn.Linear(4, 6), nn.GELU(), nn.Linear(6, 2)), randn(3, 4)


@case()
def linear_no_bias_relu_tokens():
    return nn.Sequential(nn.Linear(4, 3, bias=False), nn.ReLU()), randn(2, 3, 4)


@case()
def mlp_mse_to_buffer():
    lin = nn.Linear(3, 2)
    return Fn(lambda m, x: F.mse_loss(m.lin(x), m.target), buffers={"target": randn(4, 2)},
              lin=lin), randn(4, 3)


# --- convolution and pooling -------------------------------------------------------------


@case()
def conv_stride2_pad1_batched():
    return nn.Conv2d(2, 3, 3, stride=2, padding=1), randn(2, 2, 5, 5)


@case()
def conv_rect_kernel_stride2_unbatched():
    return nn.Conv2d(1, 2, (2, 3), stride=2), randn(1, 4, 7)


@case()
def conv_depthwise_pad1_batched():
    # groups = channels (MobileNet's depthwise convolution)
    return nn.Conv2d(3, 3, 3, padding=1, groups=3), randn(2, 3, 5, 5)


@case()
def conv_grouped_dilated_stride2():
    # two groups of two channels, taps two apart, windows two apart
    return nn.Conv2d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2), randn(1, 4, 6, 5)


@case()
def conv_dilated_rect_kernel_unbatched():
    return nn.Conv2d(2, 3, (2, 3), dilation=3, padding=1), randn(2, 7, 8)


def conv_relu_fn(c, oc, k, stride=1, padding=0, dilation=1, groups=1):
    """`conv2d_relu` (our fused kind) with weight `[oc, c/groups, k, k]` and a bias."""
    return Fn(lambda m, x: conv2d_relu(x, m.weight, m.bias, stride, padding, dilation, groups),
              params={"weight": randn(oc, c // groups, k, k), "bias": randn(oc)})


@case()
def conv2d_relu_pad1_batched():
    return conv_relu_fn(2, 3, 3, padding=1), randn(2, 2, 5, 5)


@case(dtype="f32")
def conv2d_relu_stride2_unbatched_f32():
    return conv_relu_fn(3, 4, 3, stride=2), randn(3, 7, 7)


@case()
def conv2d_relu_grouped_dilated():
    return conv_relu_fn(4, 6, 3, padding=2, dilation=2, groups=2), randn(1, 4, 6, 5)


@case(dtype="f32")
def cnn_pool_linear_f32():
    return nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(8, 3)), randn(2, 1, 4, 4)


@case()
def max_pool_stride1_overlapping():
    return nn.MaxPool2d(2, stride=1), randn(1, 2, 4, 4)


@case()
def max_pool_padded_stride2():
    return nn.MaxPool2d(3, stride=2, padding=1), randn(2, 1, 5, 5)


@case()
def avg_pool_padded_counts_zeros():
    # PyTorch's default count_include_pad=True: padded zeros count in the divisor
    return nn.AvgPool2d(3, stride=2, padding=1), randn(1, 2, 5, 5)


@case()
def avg_pool_rect_window_unbatched():
    return nn.AvgPool2d((2, 3), stride=1), randn(2, 3, 4)


@case()
def conv_relu_global_avg_head():
    return nn.Sequential(nn.Conv2d(2, 3, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(3, 2)), randn(2, 2, 4, 4)


# --- normalisation ------------------------------------------------------------------------


def random_bn(c):
    bn = nn.BatchNorm2d(c)
    with torch.no_grad():
        bn.weight.copy_(1 + 0.3 * randn(c))
        bn.bias.copy_(0.2 * randn(c))
        bn.running_mean.copy_(0.5 * randn(c))
        bn.running_var.copy_(0.5 + torch.rand(c))
    return bn


@case()
def batch_norm_eval_running_stats():
    return random_bn(3), randn(2, 3, 2, 3)


@case()
def conv_bn_relu_residual():
    body = nn.Sequential(nn.Conv2d(2, 2, 3, padding=1), random_bn(2), nn.ReLU(),
                         nn.Conv2d(2, 2, 3, padding=1))
    return Fn(lambda m, x: F.relu(m.body(x) + x), body=body), randn(1, 2, 4, 4)


@case(train=True, omit={"batch_norm2d_nchw_train": ["eps"]})
def batch_norm_train_default_eps():
    bn = nn.BatchNorm2d(2)
    with torch.no_grad():
        bn.weight.copy_(1 + 0.3 * randn(2))
        bn.bias.copy_(0.2 * randn(2))
    return bn, randn(3, 2, 2, 2) * 2 + 1


@case()
def layer_norm_affine_last_axis():
    ln = nn.LayerNorm(5)
    with torch.no_grad():
        ln.weight.copy_(1 + 0.3 * randn(5))
        ln.bias.copy_(0.2 * randn(5))
    return ln, randn(2, 3, 5)


@case(omit={"layernorm": ["eps"]})
def layer_norm_two_axes_default_eps():
    # the IR's default eps is TorchLean's 1e-6: PyTorch gets it spelt out
    return Fn(lambda m, x: F.layer_norm(x, (3, 4), eps=1e-6)), randn(2, 3, 4)


# --- activations and elementwise functions ------------------------------------------------


@case(omit={"gelu": ["approximate"]})
def gelu_default_erf():
    return nn.GELU(), randn(3, 4) * 2


@case(dtype="f32")
def gelu_tanh_f32():
    return nn.GELU(approximate="tanh"), randn(2, 5) * 2


@case()
def sign_of_signed_zeros():
    # 1 and −1 away from zero, +0 at ±0; the gradient is 0 everywhere, so the product rule
    # leaves x·d(sign) = 0 and the input gradient is sign(x)·dy
    x = torch.cat([randn(2, 4), torch.tensor([[-0.0, 0.0, 1.5, -1.5]], dtype=torch.float64)])
    return Fn(lambda m, x: torch.sign(x) * x), x


@case()
def erf_tails_and_signed_zeros():
    # the tails saturate at ±1 and the gradient 2/√π·exp(−x²) underflows there
    x = torch.cat([randn(2, 4) * 2, torch.tensor([[-6.0, -0.0, 0.0, 6.0]], dtype=torch.float64)])
    return Fn(lambda m, x: torch.erf(x) * x), x


@case()
def softmax_axis0_log_softmax_last():
    return Fn(lambda m, x: torch.softmax(x, 0) * torch.log_softmax(x, -1)), randn(3, 4)


@case()
def silu_softplus_div_by_number():
    # x / 3 has no exact scale (a const and `div`); x / 4 is `scale` 0.25
    return Fn(lambda m, x: F.silu(x) / F.softplus(x) + x / 3.0 + x / 4.0), randn(2, 4)


@case()
def unary_domain_chain():
    def f(m, x):
        p = x.abs() + 0.5
        return torch.sqrt(p) + torch.log(p) + 1.0 / p + torch.exp(-x) + torch.sin(x) * torch.cos(x)

    return Fn(f), away_from(randn(3, 3), [0.0])


@case()
def scalar_arithmetic_rsub_pow_rsqrt():
    return Fn(lambda m, x: (1 - x) * 2.5 + x.pow(2) - 3 + torch.rsqrt(x * x + 1)), randn(2, 3)


@case()
def clamp_variants_and_hardtanh():
    def f(m, x):
        return torch.clamp(x, -0.5, 0.7) + torch.clamp(x, min=0.1) + torch.clamp(x, max=-0.2) \
            + F.hardtanh(x)

    return Fn(f), away_from(randn(3, 4) * 1.5, [-1.0, -0.5, -0.2, 0.1, 0.7, 1.0])


@case(omit={"clamp": ["max"]})
def clamp_min_only_relu6_like():
    return Fn(lambda m, x: torch.clamp(x, min=-0.3) * 2), away_from(randn(2, 5), [-0.3])


@case()
def max_min_elem_with_broadcast_param():
    return Fn(lambda m, x: torch.maximum(x, m.p) - torch.minimum(x * 0.5, m.q),
              params={"p": randn(4), "q": randn(3, 1)}), randn(3, 4)


@case()
def max_min_elem_nan_and_ties():
    # NaN on either side propagates and both sides get the whole cotangent there; a tie gives
    # each side half; the parameters hold the NaN on the right, the input on the left
    def f(m, x):
        return torch.maximum(x, m.p) * 2 + torch.minimum(m.q, x)

    x = randn(2, 4)
    x[0, 1] = math.nan
    p = randn(2, 4)
    p[1, 2] = math.nan
    p[0, 3] = x[0, 3]
    q = randn(2, 4)
    q[1, 0] = math.nan
    q[0, 0] = x[0, 0]
    return Fn(f, params={"p": p, "q": q}), x


# --- broadcasting and repeated parents ----------------------------------------------------


@case()
def broadcast_last_axis_row_and_column():
    return Fn(lambda m, x: (x + m.row) * m.col, params={"row": randn(4), "col": randn(3, 1)}), randn(3, 4)


@case(omit={"const": ["value_shape"]})
def broadcast_rank_up_and_scalar_param():
    return Fn(lambda m, x: (x + m.q) * m.s, params={"q": randn(4, 1, 1), "s": randn(())}), randn(2, 3)


@case()
def repeated_parents_square_and_tie():
    # x*x, maximum(x, x) (a tie everywhere: each side gets half), x + x, cat([x, x])
    def f(m, x):
        y = x * x + torch.maximum(x, x) + (x + x)
        return torch.cat([y, y], 0)

    return Fn(f), randn(2, 3)


@case()
def matmul_square_repeated_right_operand():
    # x @ x: the right operand is square and the same node as the left
    return Fn(lambda m, x: x @ x), randn(3, 3)


@case()
def matmul_batched_square_param_right():
    # [2, 3, 3] @ [3, 3]: exported as a flattened 2-D product with a square right operand
    return Fn(lambda m, x: torch.tanh(x @ m.w), params={"w": randn(3, 3)}), randn(2, 3, 3)


@case()
def bmm_batched_param():
    return Fn(lambda m, x: torch.bmm(x, m.w), params={"w": randn(2, 4, 2)}), randn(2, 3, 4)


@case()
def attention_tiny():
    def f(m, x):
        q, k, v = m.q(x), m.k(x), m.v(x)
        s = q @ k.transpose(-1, -2) * (1 / math.sqrt(4))
        return torch.softmax(s, -1) @ v

    return Fn(f, q=nn.Linear(4, 4), k=nn.Linear(4, 4), v=nn.Linear(4, 4)), randn(2, 3, 4)


# --- layout -------------------------------------------------------------------------------


@case()
def transpose_outer_axes_and_permute():
    # transpose(0, 2) of a rank-3 tensor is the extension kind `transpose`; t() is swap_first_two
    def f(m, x):
        y = x.transpose(0, 2).permute(2, 0, 1)
        return y.reshape(6, 4).t() * m.w

    return Fn(f, params={"w": randn(4, 6)}), randn(2, 3, 4)


@case()
def reshape_view_unsqueeze_flatten():
    def f(m, x):
        y = x.view(3, 4).unsqueeze(0) * m.w
        return torch.flatten(y).sin()

    return Fn(f, params={"w": randn(1, 3, 4)}), randn(2, 6)


@case()
def cat_three_slice_narrow_select():
    def f(m, x):
        y = torch.cat([x, x * 2, m.c], 1)
        return y[:, 1:6].narrow(0, 1, 2) + y.select(0, 0)[2:7]

    return Fn(f, params={"c": randn(3, 2)}), randn(3, 4)


@case()
def reductions_keepdim_and_whole():
    def f(m, x):
        return x.sum(dim=(0, 2), keepdim=True) * x.mean(1, keepdim=True) + x.sum() - x.mean()

    return Fn(f), randn(2, 3, 4)


@case()
def relu_nan_propagates():
    # relu(NaN) is NaN and passes the cotangent; relu'(0) is 0
    x = randn(2, 3)
    x[0, 1] = math.nan
    x[1, 2] = 0.0
    return Fn(lambda m, x: F.relu(x) * 3), x


@case(omit={"leaky_relu": ["negative_slope"]})
def leaky_relu_default_slope_nan_and_zero():
    # PyTorch's default slope 0.01; NaN stays NaN; the gradient at 0 (and -0) is the slope
    return Fn(lambda m, x: F.leaky_relu(x) * 3), nan_and_signed_zeros(randn(2, 4))


@case(dtype="f32")
def leaky_relu_slope_mlp_f32():
    return nn.Sequential(nn.Linear(4, 5), nn.LeakyReLU(0.2), nn.Linear(5, 2)), randn(3, 4)


@case(omit={"elu": ["alpha"]})
def elu_default_alpha_nan_and_zero():
    # PyTorch's default alpha 1; NaN stays NaN and passes the cotangent; at 0 (and -0) the
    # gradient is alpha·exp(0). Seven elements: PyTorch's vectorised ELU backward, which runs
    # from 8 doubles on AVX2 (16 on AVX-512), gives NaN at a NaN input where its scalar loop,
    # the semantics this case pins, passes the cotangent; with 8 elements the case read one
    # gradient on an AVX-512 machine and another on an AVX2 one.
    x = randn(1, 7)
    x[0, 1], x[0, 4], x[0, 5] = math.nan, 0.0, -0.0
    return Fn(lambda m, x: F.elu(x) * 3), x


@case(dtype="f32")
def elu_alpha_mlp_f32():
    return nn.Sequential(nn.Linear(4, 5), nn.ELU(0.5), nn.Linear(5, 2)), randn(3, 4)


@case()
def means_over_zero_elements():
    # a mean over an empty axis and an MSE over zero elements are NaN, not a division by 1
    def f(m, x):
        empty = x[:, 0:0]
        return x.sum(1) + empty.mean(1) + F.mse_loss(empty, empty * 2)

    return Fn(f), randn(3, 2)


@case()
def detach_branch_stops_gradient():
    return Fn(lambda m, x: x * x.detach().tanh() + m.lin(x).detach().sum(), lin=nn.Linear(3, 3)), randn(2, 3)


# --- losses -------------------------------------------------------------------------------


@case(omit={"cross_entropy": ["reduction"]})
def cross_entropy_default_mean():
    return Fn(lambda m, x: F.cross_entropy(m.lin(x), m.t), buffers={"t": torch.tensor([2, 0, 1, 2])},
              lin=nn.Linear(3, 3)), randn(4, 3)


@case(dtype="f32")
def cross_entropy_sum_f32():
    return Fn(lambda m, x: F.cross_entropy(x * 2, m.t, reduction="sum"),
              buffers={"t": torch.tensor([1, 3, 0])}), randn(3, 4)


@case()
def cross_entropy_mean_over_no_rows():
    # the mean over zero rows is NaN; the other rows' gradient is untouched
    return Fn(lambda m, x: F.cross_entropy(x[0:0], m.t) + x.sum(),
              buffers={"t": torch.zeros(0, dtype=torch.long)}), randn(2, 3)


# --- embedding ----------------------------------------------------------------------------


@case()
def embedding_repeated_ids_table_is_input():
    # the input is the table: its gradient adds the rows of repeated ids, untouched rows get 0
    return Fn(lambda m, x: F.embedding(m.ids, x) * 1.5,
              buffers={"ids": torch.tensor([[1, 3, 1], [0, 1, 1]])}), randn(5, 3)


@case()
def embedding_module_plus_input():
    # nn.Embedding's weight is a parameter: its gradient is the case's expectation
    return Fn(lambda m, x: torch.tanh(m.emb(m.ids) + x), buffers={"ids": torch.tensor([2, 0, 2, 6])},
              emb=nn.Embedding(7, 3)), randn(4, 3)


@case(dtype="f32")
def embedding_then_linear_f32():
    return Fn(lambda m, x: m.lin(F.embedding(m.ids, x)), buffers={"ids": torch.tensor([4, 0, 4, 1, 4])},
              lin=nn.Linear(3, 2)), randn(5, 3)


# --- causal attention ---------------------------------------------------------------------


@case()
def causal_attention_gpt_block_two_heads():
    # nanoGPT's CausalSelfAttention: c_attn to [B, T, 3C], two heads of hd = 4, c_proj; the
    # custom op is F.scaled_dot_product_attention(is_causal=True) on the split heads
    return Fn(lambda m, x: m.c_proj(causal_attention(m.c_attn(x), 2)),
              c_attn=nn.Linear(8, 24), c_proj=nn.Linear(8, 8)), randn(2, 4, 8)


@case()
def causal_attention_rank2_input_is_qkv_three_heads():
    # unbatched [T, 3C] (the input itself is the packed projections), three heads of hd = 2
    return Fn(lambda m, x: torch.tanh(causal_attention(x, 3))), randn(5, 18)


@case(dtype="f32")
def causal_attention_two_leading_axes_head_dim_one_f32():
    # [2, 2, T, 3C] with four heads of one column each
    return Fn(lambda m, x: causal_attention(x, 4) * 1.5), randn(2, 2, 3, 12)


# --- deterministic randomness -------------------------------------------------------------


@case()
def rand_uniform_noise():
    # node 2 is the rand_uniform (after `scale`; the IR keys its stream by its node id)
    return Fn(lambda m, x: x * 2 + rand_uniform(x, [2, 3], 7, 2)), randn(2, 3)


@case()
def bernoulli_mask_inverted_dropout():
    # node 1 is the keep probability (a const), node 2 the mask; 0.75 is exact in f32
    return Fn(lambda m, x: x * bernoulli_mask(m.keep, [3, 4], 11, 2) * (1 / 0.75),
              buffers={"keep": torch.tensor(0.75)}), randn(3, 4)

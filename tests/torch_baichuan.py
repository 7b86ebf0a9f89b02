"""The one PyTorch Baichuan-13B reference of the repository, shared by
``tests/test_baichuan.py`` (forward == course_lib's model) and
``benchmarks/bench_baichuan_vs_torch.py`` (train-step speed on the same network).

Written independently of course_lib, after Hugging Face Baichuan-13B's modeling code:
W_pack = [Q | K | V], RMSNorm, SwiGLU, untied lm_head, and ALiBi as
``slope_h * ABSOLUTE key position`` plus an upper-triangular -inf mask (course_lib uses the
relative distance and a finite mask value; softmax makes the two equal). The ALiBi slopes
are computed here too (Baichuan's ``_get_interleave`` rule), not imported.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F


def alibi_slopes(num_heads: int) -> list[float]:
    n = 2 ** math.floor(math.log2(num_heads))
    slopes = [2 ** (-8 / n * (i + 1)) for i in range(n)]
    return slopes + [2 ** (-8 / (2 * n) * (i + 1)) for i in range(2 * n)][0::2][:num_heads - n]


class TorchBaichuan(torch.nn.Module):
    """Baichuan-13B's architecture in plain PyTorch; parameters loaded from a state dict
    with the Hugging Face names (``course_lib.hf_weights.state_dict(model)``)."""

    def __init__(self, cfg):
        super().__init__()
        h, f, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
        self.cfg = cfg
        self.embed = torch.nn.Embedding(V, h)
        self.layers = torch.nn.ModuleList()
        for _ in range(cfg.num_layers):
            layer = torch.nn.Module()
            layer.ln1 = torch.nn.Parameter(torch.ones(h))
            layer.ln2 = torch.nn.Parameter(torch.ones(h))
            layer.w_pack = torch.nn.Linear(h, 3 * h, bias=False)
            layer.o_proj = torch.nn.Linear(h, h, bias=False)
            layer.gate = torch.nn.Linear(h, f, bias=False)
            layer.up = torch.nn.Linear(h, f, bias=False)
            layer.down = torch.nn.Linear(f, h, bias=False)
            self.layers.append(layer)
        self.norm = torch.nn.Parameter(torch.ones(h))
        self.lm_head = torch.nn.Linear(h, V, bias=False)
        self.register_buffer("slopes", torch.tensor(alibi_slopes(cfg.num_heads)))

    @classmethod
    def from_state_dict(cls, sd, cfg) -> "TorchBaichuan":
        model = cls(cfg)
        model.load_from(sd)
        return model

    def rms(self, x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg.rms_norm_eps))

    def forward(self, ids):
        B, T = ids.shape
        H, d, h = self.cfg.num_heads, self.cfg.head_dim, self.cfg.hidden_size
        alibi = self.slopes[:, None, None] * torch.arange(T)[None, None, :]       # (H, 1, T)
        bias = alibi + torch.triu(torch.full((T, T), float("-inf")), 1)          # (H, T, T)
        x = self.embed(ids)
        for L in self.layers:
            q, k, v = L.w_pack(self.rms(x, L.ln1)).split(h, -1)
            q, k, v = (t.view(B, T, H, d).transpose(1, 2) for t in (q, k, v))
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d) + bias, -1)
            x = x + L.o_proj((att @ v).transpose(1, 2).reshape(B, T, h))
            y = self.rms(x, L.ln2)
            x = x + L.down(F.silu(L.gate(y)) * L.up(y))
        return self.lm_head(self.rms(x, self.norm))

    def load_from(self, sd):
        t = lambda n: torch.from_numpy(np.array(sd[n], np.float32))  # noqa: E731
        with torch.no_grad():
            self.embed.weight.copy_(t("model.embed_tokens.weight"))
            for i, L in enumerate(self.layers):
                p = f"model.layers.{i}."
                L.ln1.copy_(t(p + "input_layernorm.weight"))
                L.ln2.copy_(t(p + "post_attention_layernorm.weight"))
                L.w_pack.weight.copy_(t(p + "self_attn.W_pack.weight"))
                L.o_proj.weight.copy_(t(p + "self_attn.o_proj.weight"))
                L.gate.weight.copy_(t(p + "mlp.gate_proj.weight"))
                L.up.weight.copy_(t(p + "mlp.up_proj.weight"))
                L.down.weight.copy_(t(p + "mlp.down_proj.weight"))
            self.norm.copy_(t("model.norm.weight"))
            self.lm_head.weight.copy_(t("lm_head.weight"))

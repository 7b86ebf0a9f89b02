"""Train-step throughput: the course's Baichuan twin in MindSpore GRAPH mode vs the identical
architecture written in PyTorch (eager), same config, batch, sequence length, same weights.

    .venv/bin/python benchmarks/bench_baichuan_vs_torch.py [--hidden 128 --layers 2 --batch 8 --seq 64]

Both steps do the same work: forward, next-token cross-entropy, backward, global-norm
clipping at 1.0, AdamW (decoupled weight decay). The torch model gets the MindSpore model's
initial weights and the first losses are compared, so the two really are the same network.
Steps are timed in interleaved rounds (MindSpore, torch, MindSpore, ...) and the best round
of each is kept, so a busy machine slows both alike. Prints tokens/s and the ratio.
"""
import argparse
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

import course_lib as cl
from course_lib import baichuan
from course_lib.baichuan import BaichuanForCausalLM
from course_lib.hf_weights import state_dict
from course_lib.layers import alibi_slopes


class TorchBaichuan(torch.nn.Module):
    """Baichuan-13B's architecture in plain PyTorch (ALiBi, W_pack, SwiGLU, RMSNorm)."""

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
        self.register_buffer("slopes", torch.tensor(alibi_slopes(cfg.num_heads), dtype=torch.float32))

    def rms(self, x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.cfg.rms_norm_eps))

    def forward(self, ids):
        B, T = ids.shape
        H, d = self.cfg.num_heads, self.cfg.head_dim
        pos = torch.arange(T)
        bias = self.slopes[:, None, None] * (pos[None, None, :] - pos[None, :, None]).float()
        bias = bias.masked_fill(pos[None, None, :] > pos[None, :, None], float("-inf"))
        x = self.embed(ids)
        for L in self.layers:
            q, k, v = L.w_pack(self.rms(x, L.ln1)).split(self.cfg.hidden_size, -1)
            q, k, v = (t.view(B, T, H, d).transpose(1, 2) for t in (q, k, v))
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d) + bias, -1)
            x = x + L.o_proj((att @ v).transpose(1, 2).reshape(B, T, -1))
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10, help="steps per timed round")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    cl.setup(device="CPU", mode="graph", seed=0, quiet=True)
    from mindspore import Tensor
    from course_lib.training import AdamW, LossCell, TrainStep

    cfg = baichuan.tiny(hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads,
                        intermediate_size=int(args.hidden * 8 / 3 + 31) // 32 * 32)
    ms_model = BaichuanForCausalLM(cfg)
    tmodel = TorchBaichuan(cfg)
    tmodel.load_from(state_dict(ms_model))

    rng = np.random.default_rng(0)
    batch = rng.integers(7, cfg.vocab_size, (args.batch, args.seq + 1)).astype(np.int32)
    x_ms, y_ms = Tensor(batch[:, :-1]), Tensor(batch[:, 1:])
    x_t, y_t = torch.from_numpy(batch[:, :-1]).long(), torch.from_numpy(batch[:, 1:]).long()

    lr, wd = 1e-3, 0.1
    ms_step = TrainStep(LossCell(ms_model), AdamW(ms_model.trainable_params(), lr, weight_decay=wd), clip=1.0)
    decay = [p for n, p in tmodel.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in tmodel.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.999), eps=1e-8)

    def torch_step():
        opt.zero_grad(set_to_none=True)
        logits = tmodel(x_t)
        loss = F.cross_entropy(logits.view(-1, cfg.vocab_size), y_t.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(tmodel.parameters(), 1.0)
        opt.step()
        return loss.item()

    # same network: the first losses (identical weights, identical batch) must agree
    start = time.perf_counter()
    first_ms = float(ms_step(x_ms, y_ms)[0].asnumpy())
    compile_s = time.perf_counter() - start
    first_t = torch_step()
    print(f"config: hidden {cfg.hidden_size}, {cfg.num_layers} layers, {cfg.num_heads} heads, vocab "
          f"{cfg.vocab_size}, {cfg.num_parameters():,} params; batch {args.batch} x seq {args.seq}")
    print(f"first-step loss: MindSpore {first_ms:.5f} | torch {first_t:.5f} "
          f"(same network: {abs(first_ms - first_t) < 1e-3}); MindSpore graph compile {compile_s:.1f} s")
    torch_step()

    best = {"mindspore": float("inf"), "torch": float("inf")}
    for _ in range(args.rounds):
        t = time.perf_counter()
        for _ in range(args.steps):
            loss = ms_step(x_ms, y_ms)[0]
        loss.asnumpy()
        best["mindspore"] = min(best["mindspore"], (time.perf_counter() - t) / args.steps)
        t = time.perf_counter()
        for _ in range(args.steps):
            torch_step()
        best["torch"] = min(best["torch"], (time.perf_counter() - t) / args.steps)
    tokens = args.batch * args.seq
    tps = {k: tokens / v for k, v in best.items()}
    print(f"train-step tokens/s: MindSpore graph {tps['mindspore']:,.0f} | PyTorch eager "
          f"{tps['torch']:,.0f} (torch threads {torch.get_num_threads()}) | ratio MindSpore/PyTorch "
          f"x{tps['mindspore'] / tps['torch']:.2f}")


if __name__ == "__main__":
    main()

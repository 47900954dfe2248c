#!/usr/bin/env python3
"""PyTorch peer of bench_gpt: the same GPT (6 layers, 6 heads, width 384, context 256,
vocabulary 65, tied head; nn.MultiheadAttention batch-first, erf GELU) and the same step
(forward, backward, clip to norm 1, AdamW), median wall time with the device synchronised,
fp32 eager and bf16 autocast eager (--compile adds torch.compile). --save DIR writes the model
(gpt.safetensors) and a batch's tokens and fp32 logits (logits.safetensors) for
`bench_gpt --check DIR`, which loads them into kiln::nn::gpt."""
import argparse
import json
import math
import struct
import time

import torch
from torch import nn


class Mlp(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc, self.c_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        return self.c_proj(nn.functional.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c)
        self.attn = nn.MultiheadAttention(c, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(c)
        self.mlp = Mlp(c)

    def forward(self, x, mask):
        h = self.ln_1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False, is_causal=True)[0]
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self, vocab=65, block=256, layers=6, heads=6, c=384):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(block, c)
        self.h = nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(c)
        for name, p in self.named_parameters():
            if "ln_" in name:
                continue
            if name.endswith("bias"):
                nn.init.zeros_(p)
            else:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("c_proj.weight",
                                                                      "out_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx):
        t = idx.shape[1]
        mask = torch.nn.Transformer.generate_square_subsequent_mask(t, device=idx.device)
        x = self.wte(idx) + self.wpe.weight[:t]
        for b in self.h:
            x = b(x, mask)
        return self.ln_f(x) @ self.wte.weight.t()


def save_safetensors(path, tensors):
    names = {torch.float32: "F32", torch.int64: "I64"}
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--save")
    p.add_argument("--precision", choices=["fp32", "bf16"])
    p.add_argument("--profile", action="store_true",
                   help="after the timing, one step under torch.profiler: CUDA time per kernel")
    a = p.parse_args()
    dev = torch.device(a.device)
    torch.manual_seed(0)
    if a.save:
        m = Gpt().to(dev).eval()
        tokens = torch.randint(0, 65, (2, 256), device=dev)
        with torch.no_grad():
            logits = m(tokens).float()
        save_safetensors(f"{a.save}/gpt.safetensors", m.state_dict())
        save_safetensors(f"{a.save}/logits.safetensors", {"tokens": tokens, "logits": logits})
        print(f"saved {a.save}/gpt.safetensors and logits.safetensors")
        return
    ids = ((torch.arange(a.batch * 257) * 2654435761) % 65).reshape(a.batch, 257).to(dev)
    x, y = ids[:, :256].contiguous(), ids[:, 1:].contiguous()
    print(f"torch_gpt on {dev} (torch {torch.__version__}), batch {a.batch} x context 256")
    modes = [("fp32", False, False), ("bf16", True, False)]
    if a.compile:
        modes.append(("bf16 compiled", True, True))
    for name, bf16, compiled in modes:
        if a.precision and name.split()[0] != a.precision:
            continue
        m = Gpt().to(dev)
        decay = [q for q in m.parameters() if q.dim() >= 2]
        rest = [q for q in m.parameters() if q.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                 {"params": rest, "weight_decay": 0.0}], lr=1e-3,
                                betas=(0.9, 0.99), fused=dev.type == "cuda")
        fwd = torch.compile(m) if compiled else m

        def step():
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
                logits = fwd(x)
                loss = nn.functional.cross_entropy(logits.reshape(-1, 65).float(), y.reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)

        for _ in range(5 if compiled else 3):
            step()
        torch.cuda.synchronize()
        t = []
        for _ in range(a.runs):
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            t.append((time.perf_counter() - t0) * 1e3)
        t.sort()
        ms = t[len(t) // 2]
        n = sum(q.numel() for q in m.parameters())
        print(f"torch gpt step {name}: {ms:.2f} ms  ({a.batch * 256 / ms * 1e3:.0f} tokens/s, "
              f"{n} parameters)")
        if a.profile:
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                step()
                torch.cuda.synchronize()
            try:
                table = prof.key_averages().table(sort_by="self_device_time_total",
                                                  row_limit=60, max_name_column_width=90)
            except Exception:
                table = prof.key_averages().table(sort_by="self_cuda_time_total",
                                                  row_limit=60, max_name_column_width=90)
            print(table)


if __name__ == "__main__":
    main()

"""Forward + backward time of solutions_lib's multi-head attention, Transformer layers
and full Transformer against PyTorch's modules of the same size, as ratios.

    python benchmarks/bench_transformer_layers.py            # CPU (the course's promise is on CPU)
    python benchmarks/bench_transformer_layers.py --device cuda

Every pair runs in training mode with dropout 0.1 and the same masks; ours is
solutions_lib's modules made fused by solutions_lib.fast.fuse, as training uses
them, like nn.TransformerEncoderLayer's fast path. In the whole training step
the sources are padded, and on a CPU the fused encoder computes the real tokens only.
A ratio below 1 means ours is faster. The last line is the geometric mean of all ratios.
"""
import argparse
import math
import time

import torch
from torch import nn

from solutions_lib.attention import causal_mask, padding_mask
from solutions_lib.multihead import MultiHeadAttention
from solutions_lib.fast import fuse
from solutions_lib.transformer import DecoderLayer, EncoderLayer, Transformer, sinusoidal_encoding


def timed(step, repeats, sync=lambda: None):
    for _ in range(3):
        step()
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]  # the median is steadier than the minimum on a shared machine


def backward(out):
    out.float().pow(2).mean().backward()


class TorchSeq2Seq(nn.Module):
    """nn.Transformer with the same embeddings, positions and output projection as ours."""

    def __init__(self, vocab, d_model, h, N, d_ff, dropout, max_len=512):
        super().__init__()
        self.d_model = d_model
        self.src_embed, self.tgt_embed = nn.Embedding(vocab, d_model), nn.Embedding(vocab, d_model)
        self.core = nn.Transformer(d_model, h, N, N, d_ff, dropout, batch_first=True)
        self.out = nn.Linear(d_model, vocab)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("pe", sinusoidal_encoding(max_len, d_model), persistent=False)

    def embed(self, table, tokens):
        return self.dropout(table(tokens) * math.sqrt(self.d_model) + self.pe[: tokens.size(1)])

    def forward(self, src, tgt, src_pad, tgt_pad):
        T = tgt.size(1)
        causal = nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.bool)
        hidden = self.core(self.embed(self.src_embed, src), self.embed(self.tgt_embed, tgt), tgt_mask=causal,
                           src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad, memory_key_padding_mask=src_pad)
        return self.out(hidden)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.manual_seed(0)
    dev = torch.device(args.device)
    torch.set_default_device(dev)  # every tensor and module below is made there
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    print(f"device: {dev}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"{'what':<44} {'ours (ms)':>10} {'PyTorch (ms)':>13} {'ratio':>6}")
    ratios = []

    def report(what, ours, theirs):
        a, b = timed(ours, args.repeats, sync), timed(theirs, args.repeats, sync)
        ratios.append(a / b)
        print(f"{what:<44} {a * 1e3:>10.2f} {b * 1e3:>13.2f} {a / b:>6.2f}")

    for B, T, d_model, h in [(32, 24, 128, 4), (16, 64, 256, 8)]:
        d_ff = 4 * d_model
        x = torch.randn(B, T, d_model, requires_grad=True)
        lengths = torch.randint(T // 2, T + 1, (B,))
        allowed = padding_mask(lengths, T)  # (B, 1, T), True = real token
        hidden = ~allowed.squeeze(1)  # PyTorch's key_padding_mask: True = padding

        ours_mha, torch_mha = fuse(MultiHeadAttention(d_model, h, 0.1)).train(), nn.MultiheadAttention(d_model, h, 0.1, batch_first=True).train()
        report(f"MultiHeadAttention B={B} T={T} d={d_model} h={h}",
               lambda: backward(ours_mha(x, x, x, allowed)[0]),
               lambda: backward(torch_mha(x, x, x, key_padding_mask=hidden, need_weights=False)[0]))

        ours_enc, torch_enc = fuse(EncoderLayer(d_model, h, d_ff, 0.1)).train(), nn.TransformerEncoderLayer(d_model, h, d_ff, 0.1, batch_first=True).train()
        report(f"EncoderLayer B={B} T={T} d={d_model} h={h}",
               lambda: backward(ours_enc(x, allowed)),
               lambda: backward(torch_enc(x, src_key_padding_mask=hidden)))

        ours_dec, torch_dec = fuse(DecoderLayer(d_model, h, d_ff, 0.1)).train(), nn.TransformerDecoderLayer(d_model, h, d_ff, 0.1, batch_first=True).train()
        memory = torch.randn(B, T, d_model, requires_grad=True)
        causal = causal_mask(T)
        report(f"DecoderLayer B={B} T={T} d={d_model} h={h}",
               lambda: backward(ours_dec(x, memory, allowed, causal)),
               lambda: backward(torch_dec(x, memory, tgt_mask=~causal, memory_key_padding_mask=hidden)))

    # a whole training step at the size of notebook 08's date translation
    vocab, B, T_src, T_tgt, d_model, h, N, d_ff = 40, 64, 30, 12, 128, 4, 2, 512
    src, tgt = torch.randint(0, vocab, (B, T_src)), torch.randint(0, vocab, (B, T_tgt))
    src_allowed = padding_mask(torch.randint(T_src // 2, T_src + 1, (B,)), T_src)
    ours_model = fuse(Transformer(vocab, vocab, d_model=d_model, h=h, d_ff=d_ff, N=N, dropout=0.1)).train()
    torch_model = TorchSeq2Seq(vocab, d_model, h, N, d_ff, 0.1).train()
    loss = nn.CrossEntropyLoss()
    opt_ours, opt_torch = torch.optim.Adam(ours_model.parameters()), torch.optim.Adam(torch_model.parameters())

    def step(model, opt, logits_fn):
        opt.zero_grad()
        loss(logits_fn().reshape(-1, vocab), tgt.reshape(-1)).backward()
        opt.step()

    report(f"Transformer train step B={B} d={d_model} N={N}",
           lambda: step(ours_model, opt_ours, lambda: ours_model(src, tgt, src_allowed)),
           lambda: step(torch_model, opt_torch, lambda: torch_model(src, tgt, ~src_allowed.squeeze(1), None)))

    geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(f"layers forward+backward time ratio (solutions_lib / torch), geometric mean: {geo:.2f}")


if __name__ == "__main__":
    main()

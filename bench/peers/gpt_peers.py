"""PyTorch's own data-parallel tools on zero-train's workload (bench/peers/run drives it).

One rank of a run (bench/peers/peer_common.py: launch, data, the timed loop). The model is
zero-train's GPT-2 (models/gpt/gpt.cpp: llm.c's layout, tanh GELU, tied embedding, logits over
the real vocabulary), built from the same llm.c checkpoint; the data are the same windows of the
same text file; AdamW and clipping as in the zerocpp configs bench/peers/run writes.
"""
import math
import struct

import torch
import torch.nn.functional as F

import peer_common


def read_llmc(path):
    with open(path, "rb") as f:
        header = struct.unpack("256i", f.read(1024))
        assert header[0] == 20240326 and header[1] == 3, f"{path}: not an llm.c fp32 checkpoint"
        max_t, vocab, layers, heads, channels, padded = header[2:8]
        values = torch.frombuffer(bytearray(f.read()), dtype=torch.float32)
    return dict(max_t=max_t, vocab=vocab, layers=layers, heads=heads, channels=channels, padded=padded), values


class Block(torch.nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        p = lambda *shape: torch.nn.Parameter(torch.zeros(*shape))
        self.ln1w, self.ln1b, self.qkvw, self.qkvb = p(c), p(c), p(3 * c, c), p(3 * c)
        self.attprojw, self.attprojb, self.ln2w, self.ln2b = p(c, c), p(c), p(c), p(c)
        self.fcw, self.fcb, self.fcprojw, self.fcprojb = p(4 * c, c), p(4 * c), p(c, 4 * c), p(c)

    def forward(self, x):
        b, t, c = x.shape
        hs = c // self.heads
        h = F.layer_norm(x, (c,), self.ln1w, self.ln1b, 1e-5)
        q, k, v = F.linear(h, self.qkvw, self.qkvb).split(c, 2)
        q, k, v = (z.reshape(b, t, self.heads, hs).transpose(1, 2) for z in (q, k, v))
        scores = q.matmul(k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        future = torch.ones(t, t, dtype=torch.bool).triu(1)
        attended = torch.softmax(scores.masked_fill(future, float("-inf")), -1).matmul(v)
        y = x + F.linear(attended.transpose(1, 2).reshape(b, t, c), self.attprojw, self.attprojb)
        h = F.layer_norm(y, (c,), self.ln2w, self.ln2b, 1e-5)
        return y + F.linear(F.gelu(F.linear(h, self.fcw, self.fcb), approximate="tanh"), self.fcprojw, self.fcprojb)


class Gpt(torch.nn.Module):
    KINDS = ["ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb", "fcprojw",
             "fcprojb"]

    def __init__(self, shape, values):
        super().__init__()
        c, layers = shape["channels"], shape["layers"]
        self.vocab = shape["vocab"]
        self.wte = torch.nn.Parameter(torch.zeros(shape["padded"], c))
        self.wpe = torch.nn.Parameter(torch.zeros(shape["max_t"], c))
        self.blocks = torch.nn.ModuleList(Block(c, shape["heads"]) for _ in range(layers))
        self.lnfw, self.lnfb = torch.nn.Parameter(torch.zeros(c)), torch.nn.Parameter(torch.zeros(c))
        offset = 0
        with torch.no_grad():  # llm.c order: wte, wpe, each kind across layers, lnfw, lnfb
            for target in [[self.wte], [self.wpe]] + [[getattr(b, k) for b in self.blocks] for k in self.KINDS] + [
                    [self.lnfw], [self.lnfb]]:
                for p in target:
                    p.copy_(values[offset:offset + p.numel()].view_as(p))
                    offset += p.numel()
        assert offset == values.numel()

    def forward(self, tokens, targets):  # the loss: DDP and FSDP hook the wrapped module's forward
        t = tokens.shape[1]
        x = F.embedding(tokens, self.wte) + self.wpe[:t]
        for block in self.blocks:
            x = block(x)
        x = F.layer_norm(x, (x.shape[-1],), self.lnfw, self.lnfb, 1e-5)
        logits = x.matmul(self.wte[:self.vocab].t())
        return F.cross_entropy(logits.reshape(-1, self.vocab).float(), targets.reshape(-1))


def main():
    a = peer_common.arguments("zero-train's GPT-2 under PyTorch's data-parallel tools")
    a.add_argument("--init", required=True, help="llm.c fp32 checkpoint (zero-train --export)")
    o = a.parse_args()
    rank, ranks = peer_common.start(o)
    shape, values = read_llmc(o.init)
    peer_common.run(o, Gpt(shape, values), peer_common.read_tokens(o), o.seq or shape["max_t"], rank, ranks)


if __name__ == "__main__":
    main()

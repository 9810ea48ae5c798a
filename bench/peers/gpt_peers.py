"""PyTorch's own data-parallel tools on zero-train's workload (bench/peers/run drives it).

One rank of a run, launched by zero-run (OpenMPI's environment gives rank and size; gloo does the
communication). The model is zero-train's GPT-2 (models/gpt/gpt.cpp: llm.c's layout, tanh GELU,
tied embedding, logits over the real vocabulary), built from the same llm.c checkpoint; the data
are the same windows of the same text file (models/gpt/token_data.h: batch s is the window
tokens[s*B*T : s*B*T + B*T + 1], rank r takes rows [r*B/N, (r+1)*B/N)); AdamW and clipping as in
the zerocpp configs bench/peers/run writes. Rank 0 prints one JSON line.

Modes: single (one process), ddp, zero1 (DDP + ZeroRedundancyOptimizer), fsdp_full, fsdp_grad_op.
"""
import argparse
import json
import math
import os
import resource
import struct
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F


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


def batch(tokens, step, rows, seq, rank, ranks):
    per_epoch = (tokens.numel() - 1) // (rows * seq)
    start = (step % per_epoch) * rows * seq
    window = tokens[start:start + rows * seq + 1]
    x, y = window[:-1].view(rows, seq), window[1:].view(rows, seq)
    mine = slice(rank * rows // ranks, (rank + 1) * rows // ranks)
    return x[mine], y[mine]


def state_bytes(model, optimizer):
    """Parameters, gradients and optimizer state this rank holds (ZeroRedundancyOptimizer keeps its
    shard's state in the optimizer it wraps)."""
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    local = getattr(optimizer, "optim", optimizer)
    opt = sum(t.numel() * t.element_size() for s in local.state.values() for t in s.values()
              if torch.is_tensor(t) and t.dim() > 0)
    return params + grads + opt


def fp32_allreduce_hook(state, bucket):
    """DDP communication hook: the bucket's mean, reduced in fp32 and written back in its dtype."""
    wide = bucket.buffer().float().div_(dist.get_world_size())
    future = dist.all_reduce(wide, async_op=True).get_future()

    def narrow(done):
        bucket.buffer().copy_(done.value()[0])
        return bucket.buffer()

    return future.then(narrow)


def allow_dataclass_instance_defaults():
    """PyTorch 1.13's sharded-tensor metadata gives a dataclass field a dataclass instance as its
    default, which Python 3.11 rejects ("mutable default ... use default_factory"), so importing
    torch.distributed.fsdp fails on Debian 12. Turn such defaults into default_factory copies (what
    PyTorch 2.0 itself changed to), so that FSDP gets as far as it can here."""
    import copy
    import dataclasses
    original = dataclasses._get_field

    def get_field(cls, name, type_, *args):
        default = cls.__dict__.get(name, dataclasses.MISSING)
        value = default.default if isinstance(default, dataclasses.Field) else default
        if value is not dataclasses.MISSING and dataclasses.is_dataclass(value) and type(value).__hash__ is None:
            setattr(cls, name, dataclasses.field(default_factory=lambda v=value: copy.deepcopy(v)))
        return original(cls, name, type_, *args)

    dataclasses._get_field = get_field


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--mode", required=True, choices=["single", "ddp", "zero1", "fsdp_full", "fsdp_grad_op"])
    a.add_argument("--init", required=True)
    a.add_argument("--text", help="train on the bytes of this file")
    a.add_argument("--tokens", help="train on an llm.c token shard instead (uint16 after a 1024-byte header)")
    a.add_argument("--seq", type=int, default=0, help="row length (default: the model's maxT)")
    a.add_argument("--steps", type=int, default=30)
    a.add_argument("--warmup", type=int, default=3)
    a.add_argument("--rows", type=int, required=True, help="global batch rows")
    a.add_argument("--lr", type=float, default=1e-3)
    a.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"],
                   help="bf16: the model in bf16, AdamW on fp32 master copies (what zerocpp's bf16 does)")
    o = a.parse_args()
    torch.set_num_threads(1)
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", 0))
    ranks = int(os.environ.get("OMPI_COMM_WORLD_SIZE", 1))
    if o.mode != "single":
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29517")
        dist.init_process_group("gloo", rank=rank, world_size=ranks)
    shape, values = read_llmc(o.init)
    if o.tokens:
        with open(o.tokens, "rb") as f:
            header = struct.unpack("256i", f.read(1024))
            assert header[0] == 20240520, f"{o.tokens}: not an llm.c token shard"
            tokens = torch.frombuffer(bytearray(f.read(2 * header[2])), dtype=torch.int16).long() & 0xFFFF
    else:
        with open(o.text, "rb") as f:
            tokens = torch.tensor(list(f.read()), dtype=torch.long)
    model = Gpt(shape, values)
    masters = None
    if o.dtype == "bf16":
        model = model.to(torch.bfloat16)
        masters = [p.detach().float().clone() for p in model.parameters()]
    seq = o.seq or shape["max_t"]
    if o.mode in ("ddp", "zero1"):
        if o.dtype == "bf16":
            # gloo cannot broadcast bf16 either ("Invalid scalar type"), and DDP broadcasts rank 0's
            # weights when it wraps the model. Every rank loaded the same file: skip that sync.
            import torch.nn.parallel.distributed as ddp_module
            ddp_module._sync_module_states = lambda *args, **kwargs: None
        model = torch.nn.parallel.DistributedDataParallel(model)
        if o.dtype == "bf16":  # gloo cannot reduce bf16 ("Invalid scalar type"): in fp32, as zerocpp accumulates
            model.register_comm_hook(None, fp32_allreduce_hook)
    elif o.mode.startswith("fsdp"):
        allow_dataclass_instance_defaults()
        from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
        strategy = ShardingStrategy.FULL_SHARD if o.mode == "fsdp_full" else ShardingStrategy.SHARD_GRAD_OP
        model = FullyShardedDataParallel(model, sharding_strategy=strategy)
    params = list(model.parameters())
    stepped = masters if masters is not None else params  # what the optimizer updates
    if o.mode == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        optimizer = ZeroRedundancyOptimizer(stepped, optimizer_class=torch.optim.AdamW, lr=o.lr, weight_decay=0.01)
    else:
        optimizer = torch.optim.AdamW(stepped, lr=o.lr, weight_decay=0.01)
    ms, losses = [], []
    for step in range(o.warmup + o.steps):
        x, y = batch(tokens, step, o.rows, seq, rank, ranks)
        start = time.perf_counter()
        for p in params:
            p.grad = None
        loss = model(x, y)
        loss.backward()
        if masters is not None:
            for m, p in zip(masters, params):
                m.grad = p.grad.float()
        torch.nn.utils.clip_grad_norm_(stepped, 1.0)  # ranks hold whole gradients after DDP
        optimizer.step()
        if masters is not None:
            with torch.no_grad():
                for m, p in zip(masters, params):
                    p.copy_(m)
        elapsed = time.perf_counter() - start
        if step >= o.warmup:
            ms.append(elapsed * 1e3)
        mean = loss.detach().clone()  # the global batch's loss, as zero-train prints it (untimed)
        if ranks > 1:
            dist.all_reduce(mean)
        losses.append(mean.item() / ranks)
    state = state_bytes(model, optimizer) + sum(m.numel() * 4 for m in masters or [])
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, state], dtype=torch.float64)
    if ranks > 1:
        dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    if rank == 0:
        median = sorted(ms)[len(ms) // 2]
        print(json.dumps({"mode": o.mode, "dtype": o.dtype, "ranks": ranks, "median_ms": median,
                          "tokens_per_s": o.rows * seq / median * 1e3, "peak_rss_kib": int(rss[0]),
                          "state_bytes": int(rss[1]), "first_loss": losses[0], "last_loss": losses[-1]}))
    if ranks > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()

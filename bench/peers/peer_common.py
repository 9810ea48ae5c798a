"""What the peer models of bench/peers share: one rank of a PyTorch data-parallel run launched by
zero-run (OpenMPI's environment gives rank and size; gloo does the communication), the data as
zero-train reads it, the timed AdamW loop with clipping, and the JSON line rank 0 prints.

A model script (gpt_peers.py, llama_peers.py) adds its own arguments to `arguments()`, builds an
nn.Module whose forward(inputs, targets) returns the mean loss, and hands it to `run()`.

Modes: single (one process), ddp, zero1 (DDP + ZeroRedundancyOptimizer), fsdp_full, fsdp_grad_op.
"""
import argparse
import json
import os
import resource
import struct
import time

import torch
import torch.distributed as dist


def arguments(description):
    a = argparse.ArgumentParser(description=description)
    a.add_argument("--mode", required=True, choices=["single", "ddp", "zero1", "fsdp_full", "fsdp_grad_op"])
    a.add_argument("--text", help="train on the bytes of this file")
    a.add_argument("--tokens", help="train on an llm.c token shard instead (uint16 after a 1024-byte header)")
    a.add_argument("--seq", type=int, default=0, help="row length (default: the model's maxT)")
    a.add_argument("--steps", type=int, default=30)
    a.add_argument("--warmup", type=int, default=3)
    a.add_argument("--rows", type=int, required=True, help="global batch rows")
    a.add_argument("--lr", type=float, default=1e-3)
    a.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"],
                   help="bf16: the model in bf16, AdamW on fp32 master copies (what zerocpp's bf16 does)")
    return a


def rank_and_size():
    return int(os.environ.get("OMPI_COMM_WORLD_RANK", 0)), int(os.environ.get("OMPI_COMM_WORLD_SIZE", 1))


def read_tokens(o):
    if o.tokens:
        with open(o.tokens, "rb") as f:
            header = struct.unpack("256i", f.read(1024))
            assert header[0] == 20240520, f"{o.tokens}: not an llm.c token shard"
            return torch.frombuffer(bytearray(f.read(2 * header[2])), dtype=torch.int16).long() & 0xFFFF
    with open(o.text, "rb") as f:
        return torch.tensor(list(f.read()), dtype=torch.long)


def batch(tokens, step, rows, seq, rank, ranks):
    """zero-train's order (models/gpt/token_data.h): batch s is the window
    tokens[s*B*T : s*B*T + B*T + 1], rank r takes rows [r*B/N, (r+1)*B/N)."""
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


def start(o):
    """One thread; the process group unless single. Returns (rank, ranks)."""
    torch.set_num_threads(1)
    rank, ranks = rank_and_size()
    if o.mode != "single":
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29517")
        dist.init_process_group("gloo", rank=rank, world_size=ranks)
    return rank, ranks


def run(o, model, tokens, seq, rank, ranks):
    """Wraps `model` for o.mode, trains o.warmup + o.steps steps of AdamW (weight decay 0.01,
    clipping 1.0) timing each after the warm-up, and prints rank 0's JSON line."""
    masters = None
    if o.dtype == "bf16":
        model = model.to(torch.bfloat16)
        masters = [p.detach().float().clone() for p in model.parameters()]
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
    timed, losses = [], []  # per timed step: (total, forward, backward, optimizer) in ms
    for step in range(o.warmup + o.steps):
        x, y = batch(tokens, step, o.rows, seq, rank, ranks)
        began = time.perf_counter()
        for p in params:
            p.grad = None
        loss = model(x, y)
        forward_done = time.perf_counter()
        loss.backward()  # DDP: waits for the last bucket's all-reduce
        backward_done = time.perf_counter()
        if masters is not None:
            for m, p in zip(masters, params):
                m.grad = p.grad.float()
        torch.nn.utils.clip_grad_norm_(stepped, 1.0)  # ranks hold whole gradients after DDP
        optimizer.step()
        if masters is not None:
            with torch.no_grad():
                for m, p in zip(masters, params):
                    p.copy_(m)
        done = time.perf_counter()
        if step >= o.warmup:
            timed.append([1e3 * t for t in (done - began, forward_done - began, backward_done - forward_done,
                                             done - backward_done)])
        mean = loss.detach().clone()  # the global batch's loss, as zero-train prints it (untimed)
        if ranks > 1:
            dist.all_reduce(mean)
        losses.append(mean.item() / ranks)
    state = state_bytes(model, optimizer) + sum(m.numel() * 4 for m in masters or [])
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, state], dtype=torch.float64)
    if ranks > 1:
        dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    if rank == 0:
        median = [sorted(column)[len(column) // 2] for column in zip(*timed)]  # each phase's own median
        print(json.dumps({"mode": o.mode, "dtype": o.dtype, "ranks": ranks, "median_ms": median[0],
                          "tokens_per_s": o.rows * seq / median[0] * 1e3, "peak_rss_kib": int(rss[0]),
                          "state_bytes": int(rss[1]), "first_loss": losses[0], "last_loss": losses[-1],
                          "phases_ms": dict(zip(("fwd", "bwd", "step"), median[1:]))}))
    if ranks > 1:
        dist.destroy_process_group()

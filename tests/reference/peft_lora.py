#!/usr/bin/python3
"""Independent reference for PEFT's LoRA on the Llama family (hf_llama.py's eager model).

Written from PEFT's public sources (peft/tuners/lora/config.py, layer.py, model.py,
peft/utils/save_and_load.py, other.py) and the safetensors format, with only the stdlib and
torch, so that it shares no code with the C++ it checks:

- a targeted linear layer computes  base(x) + lora_B(lora_A(dropout(x))) * scaling,  with
  scaling = lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora (layer.py: update_layer);
- target_modules: a list of names, each matching a module whose name is it or ends in "." + it
  (check_target_module_exists), or "all-linear": every linear layer but the output layer;
- initialisation (init_lora_weights=True): lora_A Kaiming-uniform with a = sqrt(5), lora_B zero;
- modules_to_save: a trainable copy of the module; the original stays frozen;
- files: adapter_config.json and adapter_model.safetensors, keys "base_model.model." + the
  module's name + ".lora_A.weight" / ".lora_B.weight" (the adapter name removed), a module to
  save as "base_model.model." + its name + ".weight".

Every subcommand prints one JSON line on stdout.
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_llama  # noqa: E402

PREFIX = "base_model.model."


def linear_modules(c):
    """The model's linear layers (names without ".weight") in hf_llama's canonical order, the
    output layer last; MoE models are not covered by this reference."""
    if any(c.moe_layers):
        raise hf_llama.RefError("the LoRA reference covers dense models only")
    names = [n[: -len(".weight")] for n, shape, kind in hf_llama.param_specs(c)
             if kind == "w" and len(shape) == 2 and n != "model.embed_tokens.weight"]
    return names


def targeted(c, targets):
    mods = linear_modules(c)
    if targets == "all-linear":
        return [m for m in mods if m != "lm_head"]
    found = [m for m in mods if any(m == t or m.endswith("." + t) for t in targets)]
    if not found:
        raise hf_llama.RefError(f"target modules {targets} match no module")
    return found


def read_adapter(path):
    with open(os.path.join(path, "adapter_config.json")) as f:
        cfg = json.load(f)
    raw = hf_llama.read_safetensors(os.path.join(path, "adapter_model.safetensors"))[0]
    tensors = {n: hf_llama.to_tensor(dt, shp, b).to(torch.float32) for n, (dt, shp, b) in raw.items()}
    return cfg, tensors


def saved_module(P, m):
    """The module a modules_to_save entry names: the one whose name is it or ends in "." + it."""
    for n in P:
        if n.endswith(".weight") and (n[: -len(".weight")] == m or n.endswith("." + m + ".weight")):
            return n[: -len(".weight")]
    raise hf_llama.RefError(f"modules_to_save: {m} matches no module")


def scaling(cfg):
    r, alpha = cfg["r"], cfg["lora_alpha"]
    return alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r


def build(c, P, cfg, tensors):
    """The adapter's trainable tensors {key: tensor} (fp32), checked against the model, and a
    linear() for hf_llama that applies them."""
    mods = targeted(c, cfg["target_modules"])
    train = {}
    for m in mods:
        for part in ("lora_A", "lora_B"):
            key = f"{PREFIX}{m}.{part}.weight"
            if key not in tensors:
                raise hf_llama.RefError(f"adapter has no {key}")
            train[key] = tensors[key].clone()
    for m in cfg.get("modules_to_save") or []:
        key = f"{PREFIX}{saved_module(P, m)}.weight"
        train[key] = tensors[key].clone() if key in tensors else P[key[len(PREFIX):]].clone()
    s = scaling(cfg)

    def linear(Pw, x, name):
        y = F.linear(x, Pw[name + ".weight"], Pw.get(name + ".bias"))
        a = train.get(f"{PREFIX}{name}.lora_A.weight")
        if a is not None:
            b = train[f"{PREFIX}{name}.lora_B.weight"]
            y = y + F.linear(F.linear(x, a), b) * s
        return y

    return train, linear


def with_modules_to_save(P, train):
    """The base's weights with the trained copies of the modules to save in their place."""
    Q = dict(P)
    for key, t in train.items():
        if ".lora_" not in key:
            Q[key[len(PREFIX):]] = t
    return Q


def write_adapter(path, c, cfg, train):
    os.makedirs(path, exist_ok=True)
    hf_llama.write_safetensors(os.path.join(path, "adapter_model.safetensors"),
                               [(k, t.detach()) for k, t in train.items()])
    with open(os.path.join(path, "adapter_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def cmd_make(a):
    """A PEFT adapter for MODEL: LoRA's initialisation for A, but B random (std --b-std) so that a
    test of the A path means something from step 1."""
    c = hf_llama.load_config(os.path.join(a.model, "config.json"))
    P = hf_llama.load_params(a.model, c, torch.float32)
    targets = "all-linear" if a.targets == "all-linear" else a.targets.split(",")
    mods = targeted(c, targets)
    torch.manual_seed(a.seed)
    train = {}
    for m in mods:
        out_f, in_f = P[m + ".weight"].shape
        A = torch.empty(a.r, in_f)
        torch.nn.init.kaiming_uniform_(A, a=math.sqrt(5))
        train[f"{PREFIX}{m}.lora_A.weight"] = A
        train[f"{PREFIX}{m}.lora_B.weight"] = torch.randn(out_f, a.r) * a.b_std
    saved = [m for m in a.modules_to_save.split(",") if m]
    for m in saved:
        full = saved_module(P, m)
        train[f"{PREFIX}{full}.weight"] = P[full + ".weight"].clone()
    cfg = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": a.model, "r": a.r,
           "lora_alpha": a.alpha, "lora_dropout": 0.0, "target_modules": targets, "use_rslora": a.rslora,
           "modules_to_save": saved or None, "bias": "none", "fan_in_fan_out": False, "init_lora_weights": True,
           "inference_mode": True, "layers_to_transform": None, "layers_pattern": None, "rank_pattern": {},
           "alpha_pattern": {}, "use_dora": False, "revision": None}
    write_adapter(a.out, c, cfg, train)
    hf_llama.emit({"tensors": len(train)})


def cmd_train(a):
    """10 steps (or --steps) of the adapter (and modules to save) over the frozen fp32 base, on
    the token windows hf_llama.py train uses; SGD or AdamW over the trainable tensors only."""
    c = hf_llama.load_config(os.path.join(a.model, "config.json"))
    P = hf_llama.load_params(a.model, c, torch.float32)
    cfg, tensors = read_adapter(a.adapter)
    train, linear = build(c, P, cfg, tensors)
    params = [t.requires_grad_() for t in train.values()]
    if a.optimizer == "sgd":
        opt = torch.optim.SGD(params, lr=a.lr)
    else:
        opt = torch.optim.AdamW(params, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps, weight_decay=a.weight_decay)
    hf_llama.linear = linear  # hf_llama's layers look their linear() up at call time
    tokens = hf_llama.read_tokens(a.data)
    n_win = (tokens.numel() - 1) // (a.rows * a.seq)
    losses = []
    for s in range(a.steps):
        x, y = hf_llama.window(tokens, s % max(n_win, 1), a.rows, a.seq)
        opt.zero_grad(set_to_none=True)
        loss = hf_llama.forward_loss(c, with_modules_to_save(P, train), x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    if a.out:
        write_adapter(a.out, c, cfg, train)
    hf_llama.emit({"losses": losses})


def cmd_loss(a):
    c = hf_llama.load_config(os.path.join(a.model, "config.json"))
    P = hf_llama.load_params(a.model, c, torch.float32)
    cfg, tensors = read_adapter(a.adapter)
    train, linear = build(c, P, cfg, tensors)
    hf_llama.linear = linear
    x, y = hf_llama.window(hf_llama.read_tokens(a.data), 0, a.rows, a.seq)
    with torch.no_grad():
        hf_llama.emit({"loss": hf_llama.forward_loss(c, with_modules_to_save(P, train), x, y).item()})


def cmd_merged(a):
    """The logits of MERGED (a plain model directory, e.g. zero-ckpt merge-lora's) against base +
    adapter's, on the first window: their largest difference, and the largest logit."""
    c = hf_llama.load_config(os.path.join(a.model, "config.json"))
    P = hf_llama.load_params(a.model, c, torch.float32)
    M = hf_llama.load_params(a.merged, c, torch.float32)
    cfg, tensors = read_adapter(a.adapter)
    train, linear = build(c, P, cfg, tensors)
    x, _ = hf_llama.window(hf_llama.read_tokens(a.data), 0, a.rows, a.seq)
    plain = hf_llama.linear
    with torch.no_grad():
        merged = hf_llama.forward_logits(c, M, x)
        hf_llama.linear = linear
        adapted = hf_llama.forward_logits(c, with_modules_to_save(P, train), x)
    hf_llama.linear = plain
    hf_llama.emit({"max_abs_diff": (merged - adapted).abs().max().item(), "max_abs_logit": adapted.abs().max().item()})


def cmd_read(a):
    """The adapter's tensors with their shapes and the config's keys (an independent reader)."""
    cfg, tensors = read_adapter(a.adapter)
    hf_llama.emit({"config": cfg, "tensors": {k: list(t.shape) for k, t in sorted(tensors.items())}})


def cmd_batch(a):
    """Several subcommands in this process (importing torch costs 1.4 s): each line of JOBS is
    `OUTPUT COMMAND ARGS...`, the command's JSON line going to OUTPUT."""
    import contextlib
    import shlex
    with open(a.jobs) as f:
        for number, line in enumerate(f.read().splitlines(), 1):
            words = shlex.split(line)
            if not words:
                continue
            with open(words[0], "w") as out, contextlib.redirect_stdout(out):
                status = main(words[1:])
            if status:
                raise hf_llama.RefError(f"{a.jobs}:{number}: '{line}' failed (status {status})")


def main(argv):
    ap = argparse.ArgumentParser(description="Reference PEFT LoRA over hf_llama.py's model.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    data = dict(data=dict(required=True), rows=dict(required=True, type=int), seq=dict(required=True, type=int))

    def add(name, fn, positional, **flags):
        p = sub.add_parser(name)
        p.set_defaults(fn=fn)
        for x in positional:
            p.add_argument(x)
        for flag, kw in flags.items():
            p.add_argument("--" + flag.replace("_", "-"), **kw)

    add("make", cmd_make, ["model", "out"], r=dict(type=int, required=True), alpha=dict(type=float, required=True),
        targets=dict(required=True), rslora=dict(action="store_true"), modules_to_save=dict(default=""),
        seed=dict(type=int, default=5), b_std=dict(type=float, default=0.05))
    add("train", cmd_train, ["model", "adapter"], **data, steps=dict(type=int, default=10), lr=dict(type=float, required=True),
        optimizer=dict(required=True, choices=["sgd", "adamw"]), weight_decay=dict(type=float, default=0.0),
        beta1=dict(type=float, default=0.9), beta2=dict(type=float, default=0.999), eps=dict(type=float, default=1e-8),
        out=dict(default=None))
    add("loss", cmd_loss, ["model", "adapter"], **data)
    add("read", cmd_read, ["adapter"])
    add("merged", cmd_merged, ["model", "adapter", "merged"], **data)
    add("batch", cmd_batch, ["jobs"])
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    linear = hf_llama.linear  # (train and loss patch it: each command starts from the plain model)
    try:
        a.fn(a)
    except hf_llama.RefError as e:
        print(f"{a.cmd}: {e}", file=sys.stderr)
        return 1
    finally:
        hf_llama.linear = linear
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

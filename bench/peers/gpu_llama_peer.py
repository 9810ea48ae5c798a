"""PyTorch's side of zerocpp's GPU benchmark: a Hugging Face Llama directory (config.json +
model.safetensors, as `tests/reference/hf_llama.py make DIR --config CONFIG --seed 1 --dtype BF16`
writes it) trained on one device, printing one JSON line with tokens/s and MFU.

  --mode plain   the model in bf16 on the device, AdamW (lr 1e-3, weight decay 0.01) on fp32 master
                 copies, gradients cast to fp32 and clipped to norm 1.0 on the masters, the masters
                 copied back into the bf16 model: what zerocpp's bf16 does (bench/peers/peer_common.py's
                 bf16). --dtype fp32: the model itself in fp32, no masters.
  --mode fsdp2   FSDP2 (torch.distributed.fsdp.fully_shard) on a world of one: each decoder layer, then
                 the root, sharded; the parameters stay fp32 (they are the masters and Adam updates them)
                 and MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) casts them for forward and
                 backward; torch.nn.utils.clip_grad_norm_ on the sharded fp32 gradients.

  --impl hf         transformers' LlamaForCausalLM.from_pretrained(DIR, dtype=..., attn_implementation="sdpa")
                    (the default when transformers imports)
  --impl reference  the project's independent reference (tests/reference/hf_llama.py: transformers' eager
                    Llama, op for op), one module per decoder layer so that FSDP2 can wrap them

The data are zero-train's windows of an llm.c token shard (peer_common.read_tokens and batch): step s
trains on tokens[s*B*T : s*B*T + B*T + 1]. The loss is the mean cross-entropy over B*T next tokens
with the logits upcast to fp32 (transformers' ForCausalLMLoss). Every step is timed between two
device synchronisations; the first --warmup steps are not counted. tokens/s = rows*seq / median step
time; MFU = tokens/s * flops_per_token / (--peak-tflops * 1e12), flops_per_token as bench/peers/llama_run
counts it: 6 per weight of every matmul (the tied output projection included, the embedding lookup
not) + 12 * layers * seq * heads * head_dim for attention.

Any failure prints {"error": ...} as its one JSON line and exits 1.

  python3 bench/peers/gpu_llama_peer.py --model DIR --tokens FILE --seq 2048 --rows 8 \
      --steps 20 --warmup 3 --mode plain|fsdp2 [--impl hf|reference] [--device cuda|cpu]
"""
import argparse
import json
import os
import platform
import resource
import socket
import statistics
import sys
import time
import traceback

sys.dont_write_bytecode = True  # leave no __pycache__ beside the sources it imports
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "reference"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch.utils.checkpoint  # noqa: E402,F401  (not imported by `import torch` everywhere)

import hf_llama  # noqa: E402
import peer_common  # noqa: E402


def transformers_imports():
    try:
        import transformers
        return transformers is not None
    except Exception:  # a broken install falls back too; the JSON line says which impl ran
        return False


def arguments():
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--model", required=True, help="Hugging Face model directory (config.json + safetensors)")
    a.add_argument("--tokens", help="llm.c token shard (uint16 after a 1024-byte header)")
    a.add_argument("--text", help="train on the bytes of this file instead (as peer_common reads it)")
    a.add_argument("--mode", required=True, choices=["plain", "fsdp2"])
    a.add_argument("--impl", choices=["hf", "reference"], default=None,
                   help="default: hf when transformers imports, else reference")
    a.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    a.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16",
                   help="bf16: bf16 compute, fp32 master weights and Adam state (default)")
    a.add_argument("--seq", type=int, required=True, help="row length T")
    a.add_argument("--rows", type=int, required=True, help="rows B per step")
    a.add_argument("--steps", type=int, default=20, help="timed steps")
    a.add_argument("--warmup", type=int, default=3, help="untimed steps before them")
    a.add_argument("--lr", type=float, default=1e-3)
    a.add_argument("--weight-decay", type=float, default=0.01)
    a.add_argument("--clip", type=float, default=1.0)
    a.add_argument("--adamw", choices=["auto", "fused", "foreach", "single"], default="auto",
                   help="torch.optim.AdamW's implementation: auto = fused on cuda, foreach on cpu; "
                        "single = the per-tensor loop (foreach=False)")
    a.add_argument("--activation-checkpointing", action="store_true",
                   help="recompute each decoder layer in backward (hf: gradient_checkpointing_enable)")
    a.add_argument("--peak-tflops", type=float, default=800.0,
                   help="the device's dense matmul peak in the compute dtype, for MFU (default 800: "
                        "an H100's bf16 as measured)")
    a.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    return a


# ----------------------------------------------------------------------------- the reference model
class ReferenceLayer(torch.nn.Module):
    """One decoder layer of tests/reference/hf_llama.py's forward_logits, its loop body op for op."""

    def __init__(self, config, index, weights):
        super().__init__()
        self.config, self.prefix = config, f"model.layers.{index}."
        self.names = [n for n in weights]
        for n in self.names:  # parameter names cannot hold dots
            self.register_parameter(n.replace(".", "__"), torch.nn.Parameter(weights[n]))

    def forward(self, x, cos, sin, mask):
        c, p = self.config, self.prefix
        P = {n: getattr(self, n.replace(".", "__")) for n in self.names}
        h = hf_llama.rms_norm(x, P[p + "input_layernorm.weight"], c.rms_norm_eps)
        x = x + hf_llama.attention(c, P, p + "self_attn.", h, cos, sin, mask)
        h = hf_llama.rms_norm(x, P[p + "post_attention_layernorm.weight"], c.rms_norm_eps)
        m = p + "mlp."
        return x + hf_llama.linear(P, F.silu(hf_llama.linear(P, h, m + "gate_proj")) * hf_llama.linear(P, h, m + "up_proj"),
                                   m + "down_proj")


class ReferenceLlama(torch.nn.Module):
    """hf_llama.forward_loss as modules: the embedding, final norm and (untied) head at the root,
    one ReferenceLayer per decoder layer. The rope tables and masks are hf_llama's own, computed on
    the CPU as there and then kept on the device."""

    def __init__(self, directory, dtype):
        super().__init__()
        self.config = c = hf_llama.load_config(os.path.join(directory, "config.json"))
        loaded = hf_llama.load_params(directory, c, torch.float32)
        P = {n: t.to(dtype) for n, t in loaded.items()}
        self.embed = torch.nn.Parameter(P.pop("model.embed_tokens.weight"))
        self.norm = torch.nn.Parameter(P.pop("model.norm.weight"))
        self.head = None if c.tie_word_embeddings else torch.nn.Parameter(P.pop("lm_head.weight"))
        self.layers = torch.nn.ModuleList(
            ReferenceLayer(c, i, {n: P.pop(n) for n in list(P) if n.startswith(f"model.layers.{i}.")})
            for i in range(c.num_hidden_layers))
        assert not P, f"unplaced weights: {sorted(P)[:3]}"
        self.checkpointing = False
        self._tables = {}

    def tables(self, T, dtype, device):
        key = (T, dtype, str(device))
        if key not in self._tables:
            cos, sin = hf_llama.rope_tables(self.config, T, dtype)
            masks = {w: hf_llama.additive_mask(T, w, dtype).to(device) for w in set(self.config.windows)}
            self._tables[key] = (cos.to(device), sin.to(device), masks)
        return self._tables[key]

    def forward(self, inputs, targets):
        c = self.config
        x = F.embedding(inputs, self.embed, padding_idx=c.pad_token_id)
        cos, sin, masks = self.tables(inputs.shape[1], x.dtype, x.device)
        for i, layer in enumerate(self.layers):
            if self.checkpointing:
                x = torch.utils.checkpoint.checkpoint(layer, x, cos, sin, masks[c.windows[i]], use_reentrant=False)
            else:
                x = layer(x, cos, sin, masks[c.windows[i]])
        x = hf_llama.rms_norm(x, self.norm, c.rms_norm_eps)
        logits = F.linear(x, self.embed if self.head is None else self.head).float()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)


# ----------------------------------------------------------------------------- the transformers model
def load_hf(directory, dtype, info):
    """LlamaForCausalLM.from_pretrained in `dtype` with SDPA attention. transformers >= 4.56 names the
    argument `dtype` (`torch_dtype` is its deprecated alias); older ones know only `torch_dtype`."""
    import transformers
    from transformers import LlamaForCausalLM
    version = tuple(int(v) for v in transformers.__version__.split(".")[:2] if v.isdigit())
    dtype_kw = "dtype" if version >= (4, 56) else "torch_dtype"
    model = LlamaForCausalLM.from_pretrained(directory, attn_implementation="sdpa", **{dtype_kw: dtype})
    wrong = {str(p.dtype) for p in model.parameters() if p.dtype != dtype}
    if wrong:  # should not happen; cast rather than time the wrong precision, and say so
        info["cast_after_load"] = sorted(wrong)
        for p in model.parameters():
            p.data = p.data.to(dtype)
    model.config.use_cache = False
    info.update(transformers=transformers.__version__, from_pretrained_dtype_kw=dtype_kw,
                attn_implementation=getattr(model.config, "_attn_implementation", None),
                tied=model.lm_head.weight is model.model.embed_tokens.weight)
    return model


class HfLoss(torch.nn.Module):
    """forward(inputs, targets) -> the mean loss, like the reference; FSDP2 wraps the LlamaForCausalLM
    inside (its root), not this."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, inputs, targets):
        logits = self.model(input_ids=inputs, use_cache=False).logits.float()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)


# ----------------------------------------------------------------------------- set-up
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_world_of_one(device):
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1)
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh(device.type, (1,))


def shard(module, layers, mesh, dtype):
    """fully_shard each decoder layer, then the root (bottom-up, as FSDP2 asks)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if dtype == torch.bfloat16 else MixedPrecisionPolicy())
    for layer in layers:
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(module, mesh=mesh, mp_policy=policy)
    return policy


def make_adamw(params, o, device):
    impl = o.adamw if o.adamw != "auto" else ("fused" if device.type == "cuda" else "foreach")
    kw = {"fused": dict(fused=True), "foreach": dict(foreach=True), "single": dict(foreach=False)}[impl]
    return torch.optim.AdamW(params, lr=o.lr, weight_decay=o.weight_decay, **kw), impl


def flops_per_token(config, T):
    """bench/peers/llama_run's count."""
    c = config
    matmul = sum(s[0] * s[1] for n, s, _ in hf_llama.param_specs(c) if len(s) == 2 and n != "model.embed_tokens.weight")
    matmul += 0 if not c.tie_word_embeddings else c.vocab_size * c.hidden_size
    return 6 * matmul + 12 * c.num_hidden_layers * T * c.num_attention_heads * c.head_dim


def device_name(device):
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "cpu"


def local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def state_bytes(params, optimizer, masters):
    """Parameters, gradients, master copies and Adam state this process holds."""
    n = sum(local(p).numel() * p.element_size() for p in params)
    n += sum(local(p.grad).numel() * p.grad.element_size() for p in params if p.grad is not None)
    n += sum(m.numel() * 4 + (m.grad.numel() * 4 if m.grad is not None else 0) for m in masters or [])
    n += sum(local(t).numel() * t.element_size() for s in optimizer.state.values() for t in s.values()
             if torch.is_tensor(t) and t.dim() > 0)
    return n


# ----------------------------------------------------------------------------- the run
def run(o, info):
    device = torch.device(o.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda but torch.cuda.is_available() is False")
        torch.cuda.set_device(0)
        device = torch.device("cuda", 0)
    if o.threads:
        torch.set_num_threads(o.threads)
    info.update(torch=torch.__version__, cuda=torch.version.cuda, device=device_name(device),
                python=platform.python_version())
    compute = torch.bfloat16 if o.dtype == "bf16" else torch.float32
    config = hf_llama.load_config(os.path.join(o.model, "config.json"))
    tokens = peer_common.read_tokens(o)
    if (tokens.numel() - 1) // (o.rows * o.seq) < 1:
        raise ValueError(f"{tokens.numel()} tokens hold no window of {o.rows}x{o.seq}+1")

    mesh = start_world_of_one(device) if o.mode == "fsdp2" else None
    # Weights as loaded: plain keeps the model in the compute dtype (bf16) beside fp32 masters;
    # fsdp2 keeps fp32 parameters and lets the policy cast them.
    load_dtype = compute if o.mode == "plain" else torch.float32
    if o.impl == "hf":
        inner = load_hf(o.model, load_dtype, info)
        if o.activation_checkpointing:
            inner.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        inner.train()
        layers, root = list(inner.model.layers), inner
        model = HfLoss(inner)
    else:
        inner = ReferenceLlama(o.model, load_dtype)
        inner.checkpointing = o.activation_checkpointing
        inner.train()
        layers, root, model = list(inner.layers), inner, inner
    model.to(device)
    if o.mode == "fsdp2":
        policy = shard(root, layers, mesh, compute)
        info["mp_policy"] = repr(policy)
    params = list(model.parameters())  # a tied weight once
    info["parameters"] = sum(local(p).numel() for p in params)
    masters = None
    if o.mode == "plain" and compute != torch.float32:
        masters = [p.detach().float().clone() for p in params]
    stepped = masters if masters is not None else params
    optimizer, adamw_impl = make_adamw(stepped, o, device)
    info["adamw"] = adamw_impl

    cuda = device.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    def mark():
        if cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def between(a, b):
        return a.elapsed_time(b) if cuda else 1e3 * (b - a)

    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    steps_ms, phases, losses, norms = [], [], [], []
    for step in range(o.warmup + o.steps):
        x, y = peer_common.batch(tokens, step, o.rows, o.seq, 0, 1)
        x, y = x.to(device), y.to(device)
        sync()
        began = time.perf_counter()
        m0 = mark()
        for p in params:
            p.grad = None
        loss = model(x, y)
        m1 = mark()
        loss.backward()
        m2 = mark()
        if masters is not None:
            for m, p in zip(masters, params):
                m.grad = None if p.grad is None else p.grad.float()
        norm = torch.nn.utils.clip_grad_norm_(stepped, o.clip)
        try:
            optimizer.step()
        except (RuntimeError, NotImplementedError, TypeError) as e:
            if adamw_impl != "fused" or step:
                raise
            # Fused AdamW refused these parameters (say, an older FSDP2's DTensors): foreach instead,
            # from the first step, and the line says so.
            info["adamw_fused_failed"] = f"{type(e).__name__}: {e}"[:300]
            optimizer = torch.optim.AdamW(stepped, lr=o.lr, weight_decay=o.weight_decay, foreach=True)
            adamw_impl = info["adamw"] = "foreach"
            optimizer.step()
        if masters is not None:
            with torch.no_grad():
                for m, p in zip(masters, params):
                    p.copy_(m)
        m3 = mark()
        sync()
        done = time.perf_counter()
        losses.append(loss.item())  # untimed
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        norms.append(float(norm))
        if step >= o.warmup:
            steps_ms.append(1e3 * (done - began))
            phases.append((between(m0, m1), between(m1, m2), between(m2, m3)))

    median = statistics.median(steps_ms)
    tokens_per_s = o.rows * o.seq / median * 1e3
    fpt = flops_per_token(config, o.seq)
    info.update(
        median_ms=median, tokens_per_s=tokens_per_s, flops_per_token=fpt, peak_tflops=o.peak_tflops,
        mfu=tokens_per_s * fpt / (o.peak_tflops * 1e12), model_tflops=tokens_per_s * fpt / 1e12,
        phases_ms=dict(zip(("fwd", "bwd", "step"), (statistics.median(c) for c in zip(*phases)))),
        steps_ms=[round(t, 3) for t in steps_ms], losses=losses, grad_norms=norms,
        first_loss=losses[0], last_loss=losses[-1], state_bytes=state_bytes(params, optimizer, masters),
        peak_rss_kib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    if cuda:
        info.update(peak_mem_bytes=torch.cuda.max_memory_allocated(device),
                    peak_reserved_bytes=torch.cuda.max_memory_reserved(device))
    if o.mode == "fsdp2":
        import torch.distributed as dist
        dist.destroy_process_group()


def main():
    a = arguments()
    o = a.parse_args()
    if not (o.tokens or o.text):
        a.error("--tokens (or --text) is required")
    if o.impl is None:
        o.impl = "hf" if transformers_imports() else "reference"
    info = {"mode": o.mode, "impl": o.impl, "dtype": o.dtype, "device_type": o.device, "rows": o.rows,
            "seq": o.seq, "steps": o.steps, "warmup": o.warmup, "lr": o.lr, "weight_decay": o.weight_decay,
            "clip": o.clip, "activation_checkpointing": o.activation_checkpointing,
            "master_weights": "fp32" if o.dtype == "bf16" else "none (fp32 model)", "model": o.model}
    try:
        run(o, info)
    except BaseException as e:  # noqa: B902 — the one JSON line must come out whatever happened
        traceback.print_exc(file=sys.stderr)
        info["error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(info), flush=True)
        sys.exit(1)
    print(json.dumps(info), flush=True)


if __name__ == "__main__":
    main()

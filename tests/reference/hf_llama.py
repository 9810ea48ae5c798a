#!/usr/bin/python3
"""Independent reference for Hugging Face LlamaForCausalLM / MistralForCausalLM /
Qwen2ForCausalLM / MixtralForCausalLM / Qwen2MoeForCausalLM as transformers computes them in
eager attention mode.

Written from the transformers sources (modeling_{llama,mistral,qwen2,mixtral,qwen2_moe}.py,
configuration_*.py, modeling_rope_utils.py, masking_utils.py, loss_utils.py) and
the safetensors format, using only the stdlib and torch, so that it shares no code
with the C++ it checks.  Every subcommand prints exactly one JSON line on stdout.

Where a result must match HF bit for bit the torch ops below are issued in the same
order and dtypes as HF issues them: reordering (say) the rope products or the
attention scale changes bf16 roundings.
"""
import argparse
import contextlib
import ctypes
import hashlib
import json
import math
import os
import shlex
import shutil
import struct
import sys
import types

import torch
import torch.nn.functional as F

# ----------------------------------------------------------------------------- config
# HF __init__ defaults of the fields we use, per model_type (configuration_*.py).
# num_key_value_heads: Llama None -> num_attention_heads; Mistral 8; Qwen2 32.
_COMMON = dict(hidden_act="silu", rms_norm_eps=1e-6, rope_theta=10000.0, rope_scaling=None,
               tie_word_embeddings=False, head_dim=None, pad_token_id=None,
               vocab_size=32000, hidden_size=4096, num_hidden_layers=32, num_attention_heads=32)
DEFAULTS = {
    "llama": dict(_COMMON, intermediate_size=11008, num_key_value_heads=None,
                  max_position_embeddings=2048, attention_bias=False, mlp_bias=False),
    "mistral": dict(_COMMON, intermediate_size=14336, num_key_value_heads=8,
                    max_position_embeddings=4096 * 32, sliding_window=4096),
    "qwen2": dict(_COMMON, vocab_size=151936, intermediate_size=22016, num_key_value_heads=32,
                  max_position_embeddings=32768, use_sliding_window=False, sliding_window=4096,
                  max_window_layers=28, layer_types=None),
    # configuration_mixtral.py: Mistral's attention (sliding_window None by default), experts.
    "mixtral": dict(_COMMON, intermediate_size=14336, num_key_value_heads=8, max_position_embeddings=4096 * 32,
                    rope_theta=1e6, rms_norm_eps=1e-5, sliding_window=None, num_local_experts=8,
                    num_experts_per_tok=2, output_router_logits=False, router_aux_loss_coef=0.001,
                    router_jitter_noise=0.0),
    # configuration_qwen2_moe.py: Qwen2's attention (qkv_bias), experts on every
    # decoder_sparse_step-th layer not in mlp_only_layers, a shared expert behind a sigmoid gate.
    "qwen2_moe": dict(_COMMON, vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                      num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=32768,
                      use_sliding_window=False, sliding_window=4096, max_window_layers=28, layer_types=None,
                      decoder_sparse_step=1, moe_intermediate_size=1408, shared_expert_intermediate_size=5632,
                      num_experts_per_tok=4, num_experts=60, norm_topk_prob=False, output_router_logits=False,
                      router_aux_loss_coef=0.001, mlp_only_layers=[], qkv_bias=True),
}
ARCH = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
        "MixtralForCausalLM": "mixtral", "Qwen2MoeForCausalLM": "qwen2_moe"}


class RefError(Exception):
    pass


def resolve_config(raw):
    """config.json dict -> namespace with every field HF would end up with."""
    mt = raw.get("model_type") or ARCH.get((raw.get("architectures") or [None])[0])
    if mt not in DEFAULTS:
        raise RefError(f"unsupported model_type/architectures: {mt!r}")
    d = dict(DEFAULTS[mt])
    d.update(raw)  # an explicit null in config.json reaches HF's __init__ as None too
    c = types.SimpleNamespace(**d)
    c.model_type = mt
    if c.hidden_act not in ("silu", "swish"):  # ACT2FN maps both to SiLU
        raise RefError(f"hidden_act {c.hidden_act!r} not supported")
    if c.num_key_value_heads is None:
        c.num_key_value_heads = c.num_attention_heads
    if c.head_dim is None:
        c.head_dim = c.hidden_size // c.num_attention_heads
    if c.num_attention_heads % c.num_key_value_heads:
        raise RefError("num_attention_heads must be a multiple of num_key_value_heads")
    # Which projections carry a bias is fixed per architecture, not only by config.
    c.qkv_bias = {"llama": bool(d.get("attention_bias")), "mistral": False, "qwen2": True, "mixtral": False,
                  "qwen2_moe": bool(d.get("qkv_bias"))}[mt]
    c.o_bias = mt == "llama" and bool(d.get("attention_bias"))
    c.mlp_bias = mt == "llama" and bool(d.get("mlp_bias"))
    # v5-style configs fold theta and scaling into rope_parameters.
    rp = raw.get("rope_parameters")
    if isinstance(rp, dict) and "rope_scaling" not in raw:
        c.rope_theta = rp.get("rope_theta", c.rope_theta)
        c.rope_scaling = rp if rp.get("rope_type", rp.get("type", "default")) != "default" else None
    # Per-layer sliding window (None = plain causal), see masking_utils.py.
    L = c.num_hidden_layers
    if mt == "llama":
        c.windows = [None] * L
    elif mt in ("mistral", "mixtral"):  # every layer windowed unless sliding_window is null
        c.windows = [c.sliding_window] * L
    else:  # qwen2: window only if use_sliding_window, and only on layer_types "sliding_attention"
        sw = c.sliding_window if c.use_sliding_window else None
        types_ = c.layer_types or ["sliding_attention" if sw is not None and i >= c.max_window_layers
                                   else "full_attention" for i in range(L)]
        if len(types_) != L:
            raise RefError("layer_types must have num_hidden_layers entries")
        if "sliding_attention" in types_ and sw is None:
            raise RefError("layer_types asks for sliding attention but sliding_window is unset")
        c.windows = [sw if t == "sliding_attention" else None for t in types_]
    # Experts: which layers have them (the rest a dense MLP of intermediate_size), how many, the
    # top-k, and each expert's width.
    c.moe_layers = [False] * L
    c.shared_size = 0
    if mt == "mixtral":
        if c.router_jitter_noise:
            raise RefError("router_jitter_noise makes training random; not reproducible here")
        c.moe_layers = [True] * L
        c.num_experts, c.expert_size, c.norm_topk = c.num_local_experts, c.intermediate_size, True
        c.expert_names = ("w1", "w3", "w2")  # gate, up, down
        c.moe_prefix = "block_sparse_moe."
    elif mt == "qwen2_moe":
        c.moe_layers = [i not in c.mlp_only_layers and c.num_experts > 0 and (i + 1) % c.decoder_sparse_step == 0
                        for i in range(L)]
        c.expert_size, c.norm_topk = c.moe_intermediate_size, c.norm_topk_prob
        c.shared_size = c.shared_expert_intermediate_size
        c.expert_names = ("gate_proj", "up_proj", "down_proj")
        c.moe_prefix = "mlp."
    return c


def load_config(path):
    with open(path) as f:
        return resolve_config(json.load(f))


def param_specs(c):
    """(name, shape, kind) in the canonical order used by `make` and the loaders."""
    H, I, V, hd = c.hidden_size, c.intermediate_size, c.vocab_size, c.head_dim
    nq, nkv = c.num_attention_heads * hd, c.num_key_value_heads * hd
    specs = [("model.embed_tokens.weight", (V, H), "w")]
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        specs.append((p + "input_layernorm.weight", (H,), "norm"))
        for proj, out, inp, bias in (("q", nq, H, c.qkv_bias), ("k", nkv, H, c.qkv_bias),
                                     ("v", nkv, H, c.qkv_bias), ("o", H, nq, c.o_bias)):
            specs.append((f"{p}self_attn.{proj}_proj.weight", (out, inp), "w"))
            if bias:
                specs.append((f"{p}self_attn.{proj}_proj.bias", (out,), "bias"))
        specs.append((p + "post_attention_layernorm.weight", (H,), "norm"))
        if c.moe_layers[i]:
            m, (g, u, d), Ie = p + c.moe_prefix, c.expert_names, c.expert_size
            specs.append((m + "gate.weight", (c.num_experts, H), "w"))
            for e in range(c.num_experts):
                for proj, out, inp in ((g, Ie, H), (u, Ie, H), (d, H, Ie)):
                    specs.append((f"{m}experts.{e}.{proj}.weight", (out, inp), "w"))
            if c.shared_size:
                for proj, out, inp in (("gate", c.shared_size, H), ("up", c.shared_size, H), ("down", H, c.shared_size)):
                    specs.append((f"{m}shared_expert.{proj}_proj.weight", (out, inp), "w"))
                specs.append((m + "shared_expert_gate.weight", (1, H), "w"))
            continue
        for proj, out, inp in (("gate", I, H), ("up", I, H), ("down", H, I)):
            specs.append((f"{p}mlp.{proj}_proj.weight", (out, inp), "w"))
            if c.mlp_bias:
                specs.append((f"{p}mlp.{proj}_proj.bias", (out,), "bias"))
    specs.append(("model.norm.weight", (H,), "norm"))
    if not c.tie_word_embeddings:
        specs.append(("lm_head.weight", (V, H), "w"))
    return specs


# ----------------------------------------------------------------------------- model
def inv_freq(c):
    """modeling_rope_utils: default, linear and llama3 inverse frequencies, in fp32."""
    dim = c.head_dim
    inv = 1.0 / (c.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    rs = c.rope_scaling
    if not rs:
        return inv
    # The Llama/Qwen2 configs copy a legacy "type" over "rope_type"; Mistral's does not.
    if "type" in rs and c.model_type != "mistral":
        kind = rs["type"]
    else:
        kind = rs.get("rope_type", rs.get("type"))
    if kind == "default":
        return inv
    if kind == "linear":  # scaling the frequencies == scaling the positions
        return inv / rs["factor"]
    if kind != "llama3":
        raise RefError(f"rope type {kind!r} not supported")
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old_ctx = rs["original_max_position_embeddings"]
    # Python scalars against fp32 tensors, in HF's order, so every rounding is fp32's.
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old_ctx / lo, inv / factor, inv)
    smooth = (old_ctx / wavelen - lo) / (hi - lo)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old_ctx / hi) * ~(wavelen > old_ctx / lo)
    return torch.where(medium, blended, scaled)


def rope_tables(c, T, dtype):
    # HF takes the outer product as a batched fp32 matmul and casts cos/sin only at the end.
    pos = torch.arange(T, dtype=torch.int64)[None, None, :].float()
    freqs = (inv_freq(c)[None, :, None].float() @ pos).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)  # attention_scaling is 1.0 for these types


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def additive_mask(T, window, dtype):
    """eager_mask: 0 where attended, finfo(dtype).min elsewhere. Query q sees keys
    k <= q, and with a window W only k > q - W (W keys, itself included)."""
    q = torch.arange(T)[:, None]
    k = torch.arange(T)[None, :]
    keep = k <= q
    if window is not None:
        keep = keep & (k > q - window)
    return torch.full((T, T), torch.finfo(dtype).min, dtype=dtype).masked_fill(keep, 0.0)


def rms_norm(x, w, eps):
    dt = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(dt)


def linear(P, x, name):
    return F.linear(x, P[name + ".weight"], P.get(name + ".bias"))


def attention(c, P, p, x, cos, sin, mask):
    B, T, _ = x.shape
    hd, nh, nkv = c.head_dim, c.num_attention_heads, c.num_key_value_heads
    q = linear(P, x, p + "q_proj").view(B, T, -1, hd).transpose(1, 2)
    k = linear(P, x, p + "k_proj").view(B, T, -1, hd).transpose(1, 2)
    v = linear(P, x, p + "v_proj").view(B, T, -1, hd).transpose(1, 2)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    q = (q * cos) + (rotate_half(q) * sin)
    k = (k * cos) + (rotate_half(k) * sin)
    g = nh // nkv  # query head h reads kv head h // g
    k = k[:, :, None].expand(B, nkv, g, T, hd).reshape(B, nh, T, hd)
    v = v[:, :, None].expand(B, nkv, g, T, hd).reshape(B, nh, T, hd)
    scores = torch.matmul(q, k.transpose(2, 3)) * hd ** -0.5
    scores = scores + mask
    probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    out = torch.matmul(probs, v).transpose(1, 2).contiguous().reshape(B, T, -1)
    return linear(P, out, p + "o_proj")


def swiglu(P, m, names, x):
    g, u, d = names
    return linear(P, F.silu(linear(P, x, m + g)) * linear(P, x, m + u), m + d)


def sparse_moe(c, P, m, h, router_logits):
    """MixtralSparseMoeBlock / Qwen2MoeSparseMoeBlock (transformers 4's eager loop): each token's
    top-k experts by the fp32 softmax of the router's logits (renormalised over the k for Mixtral,
    and for Qwen2-MoE when norm_topk_prob), weights cast to the activations' dtype, each expert's
    tokens in one matmul, summed into the output expert by expert; no token dropped."""
    B, T, H = h.shape
    x = h.reshape(-1, H)
    logits = F.linear(x, P[m + "gate.weight"])
    router_logits.append(logits)
    probs = F.softmax(logits, dim=1, dtype=torch.float)
    weights, chosen = torch.topk(probs, c.num_experts_per_tok, dim=-1)
    if c.norm_topk:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    weights = weights.to(x.dtype)
    out = torch.zeros_like(x)
    hits = F.one_hot(chosen, num_classes=c.num_experts).permute(2, 1, 0)  # [E, k, tokens]
    for e in range(c.num_experts):
        slot, token = torch.where(hits[e])
        if token.numel() == 0:
            continue
        y = swiglu(P, f"{m}experts.{e}.", c.expert_names, x[token]) * weights[token, slot, None]
        out.index_add_(0, token, y.to(x.dtype))
    if c.shared_size:
        shared = swiglu(P, m + "shared_expert.", ("gate_proj", "up_proj", "down_proj"), x)
        out = out + torch.sigmoid(F.linear(x, P[m + "shared_expert_gate.weight"])) * shared
    return out.reshape(B, T, H)


def load_balancing_loss(c, router_logits):
    """load_balancing_loss_func without an attention mask: the MoE layers' logits pooled, E times
    the sum over experts of (the share of top-k picks it got) x (its mean routing probability)."""
    G = torch.cat(router_logits, dim=0)
    probs = F.softmax(G, dim=-1)
    _, chosen = torch.topk(probs, c.num_experts_per_tok, dim=-1)
    picked = F.one_hot(chosen, c.num_experts)
    share = torch.mean(picked.float(), dim=0)  # [k, E]
    mean_prob = torch.mean(probs, dim=0)       # [E]
    return torch.sum(share * mean_prob.unsqueeze(0)) * c.num_experts


def forward_logits(c, P, ids, router_logits=None):
    """ids [B,T] int64 -> logits [B,T,V] in the weights' dtype (HF: lm_head output); the MoE
    layers' router logits appended to `router_logits`."""
    router_logits = [] if router_logits is None else router_logits
    emb = P["model.embed_tokens.weight"]
    # nn.Embedding(padding_idx=pad_token_id): that row gets no gradient.
    x = F.embedding(ids, emb, padding_idx=c.pad_token_id)
    T, dt = ids.shape[1], x.dtype
    cos, sin = rope_tables(c, T, dt)
    masks = {w: additive_mask(T, w, dt) for w in set(c.windows)}
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        h = rms_norm(x, P[p + "input_layernorm.weight"], c.rms_norm_eps)
        x = x + attention(c, P, p + "self_attn.", h, cos, sin, masks[c.windows[i]])
        h = rms_norm(x, P[p + "post_attention_layernorm.weight"], c.rms_norm_eps)
        if c.moe_layers[i]:
            x = x + sparse_moe(c, P, p + c.moe_prefix, h, router_logits)
        else:
            x = x + swiglu(P, p + "mlp.", ("gate_proj", "up_proj", "down_proj"), h)
    x = rms_norm(x, P["model.norm.weight"], c.rms_norm_eps)
    head = emb if c.tie_word_embeddings else P["lm_head.weight"]
    return F.linear(x, head)


def forward_loss(c, P, inputs, targets, chunks=1):
    """loss_utils.ForCausalLMLoss: logits upcast to fp32, mean CE (no -100 labels here); with
    output_router_logits plus router_aux_loss_coef x the load-balancing loss. That one is not a
    mean over rows, so a batch trained as `chunks` equal parts (data-parallel ranks x micro-batches,
    each a forward of its own) is the mean of the parts' losses."""
    parts = []
    for x, y in zip(inputs.chunk(chunks), targets.chunk(chunks)):
        router_logits = []
        logits = forward_logits(c, P, x, router_logits).float()
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100)
        if getattr(c, "output_router_logits", False) and router_logits:
            loss = loss + c.router_aux_loss_coef * load_balancing_loss(c, router_logits)
        parts.append(loss)
    return sum(parts) / len(parts)


# ----------------------------------------------------------------------------- safetensors
DT_SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
           "U8": 1, "BOOL": 1, "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1}
DT_TORCH = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
            "BF16": torch.bfloat16, "I64": torch.int64, "I32": torch.int32, "I16": torch.int16,
            "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}
TORCH_DT = {v: k for k, v in DT_TORCH.items()}
assert sys.byteorder == "little", "safetensors data is little-endian; so is every tensor here"


def raw_bytes(t):
    t = t.detach().contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def write_safetensors(path, named):
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in named:
        b = raw_bytes(t)
        header[name] = {"dtype": TORCH_DT[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)
    return off


def _no_dup_keys(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError(f"duplicate key in header: {sorted(k for k in keys if keys.count(k) > 1)[0]}")
    return dict(pairs)


def read_safetensors(path):
    """Strict parser: returns ({name: (dtype, shape, raw bytes)}, __metadata__)."""
    def fail(msg):
        raise RefError(f"{path}: {msg}")
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8:
        fail("shorter than the 8-byte header length")
    n = struct.unpack_from("<Q", buf, 0)[0]
    if 8 + n > len(buf):
        fail(f"header length {n} runs past the end of the file ({len(buf)} bytes)")
    if n % 8:
        fail(f"header length {n} is not a multiple of 8: data would not start 8-byte aligned")
    try:
        text = buf[8:8 + n].decode("utf-8")
        header = json.loads(text, object_pairs_hook=_no_dup_keys)
    except ValueError as e:
        fail(f"header is not valid JSON: {e}")
    if not text.startswith("{") or not isinstance(header, dict):
        fail("header is not a JSON object")
    meta = header.pop("__metadata__", None)
    if not isinstance(meta, dict) or meta.get("format") != "pt":
        fail(f'__metadata__ must be an object with "format": "pt", got {meta!r}')
    if not all(isinstance(v, str) for v in meta.values()):
        fail("__metadata__ values must be strings")
    data = memoryview(buf)[8 + n:]
    spans, out = [], {}
    for name, info in header.items():
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            fail(f"tensor {name}: entry must have exactly dtype, shape, data_offsets")
        dt, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
        if dt not in DT_SIZE:
            fail(f"tensor {name}: unknown dtype {dt!r}")
        if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
            fail(f"tensor {name}: bad shape {shape!r}")
        if (not isinstance(offs, list) or len(offs) != 2 or not all(type(o) is int for o in offs)
                or not 0 <= offs[0] <= offs[1]):
            fail(f"tensor {name}: bad data_offsets {offs!r}")
        want = math.prod(shape) * DT_SIZE[dt]
        if offs[1] - offs[0] != want:
            fail(f"tensor {name}: {offs[1] - offs[0]} bytes but shape {shape} of {dt} needs {want}")
        spans.append((offs[0], offs[1], name))
        out[name] = (dt, shape, bytes(data[offs[0]:offs[1]]))
    pos = 0
    for b, e, name in sorted(spans):
        if b != pos:
            fail(f"tensor {name}: starts at {b}, expected {pos} ({'gap' if b > pos else 'overlap'})")
        pos = e
    if pos != len(data):
        fail(f"data section is {len(data)} bytes but tensors cover {pos}")
    return out, meta


def to_tensor(dt, shape, raw):
    if dt not in DT_TORCH:
        raise RefError(f"dtype {dt} has no torch equivalent here")
    if not raw:
        return torch.empty(shape, dtype=DT_TORCH[dt])
    return torch.frombuffer(bytearray(raw), dtype=DT_TORCH[dt]).reshape(shape)


def read_model(path):
    """Directory (model.safetensors, else index + shards) or one file ->
    ({name: (dtype, shape, raw)}, metadata, [files]). HF also prefers the single file."""
    if os.path.isfile(path):
        t, meta = read_safetensors(path)
        return t, meta, [os.path.basename(path)]
    single = os.path.join(path, "model.safetensors")
    if os.path.exists(single):
        t, meta = read_safetensors(single)
        return t, meta, ["model.safetensors"]
    idx_path = os.path.join(path, "model.safetensors.index.json")
    if not os.path.exists(idx_path):
        raise RefError(f"{path}: neither model.safetensors nor model.safetensors.index.json")
    try:
        with open(idx_path) as f:
            index = json.load(f, object_pairs_hook=_no_dup_keys)
        wmap, imeta = index["weight_map"], index["metadata"]
    except (ValueError, KeyError, TypeError) as e:
        raise RefError(f"{idx_path}: not a valid index: {e}")
    files = sorted(set(wmap.values()))
    tensors, total = {}, 0
    for fn in files:
        fp = os.path.join(path, fn)
        if not os.path.isfile(fp):
            raise RefError(f"{idx_path}: weight_map names {fn}, which does not exist")
        ts, _ = read_safetensors(fp)
        for name, val in ts.items():
            if wmap.get(name) != fn:
                raise RefError(f"{fp}: tensor {name} is not mapped to this file in the index")
            if name in tensors:
                raise RefError(f"{fp}: tensor {name} also appears in another shard")
            tensors[name] = val
            total += len(val[2])
    for name, fn in wmap.items():
        if name not in tensors:
            raise RefError(f"{os.path.join(path, fn)}: tensor {name} from the weight_map is missing")
    if imeta.get("total_size") != total:
        raise RefError(f"{idx_path}: metadata.total_size {imeta.get('total_size')} != {total} bytes of tensors")
    return tensors, imeta, files


def load_params(path, c, dtype):
    """Model weights as {name: tensor of dtype}, checked against HF's expected names/shapes."""
    raw, _, _ = read_model(path)
    specs = param_specs(c)
    want = {n for n, _, _ in specs}
    extra = set(raw) - want - ({"lm_head.weight"} if c.tie_word_embeddings else set())  # tied: HF drops it
    missing = want - set(raw)
    if missing or extra:
        raise RefError(f"{path}: missing {sorted(missing)[:5]} unexpected {sorted(extra)[:5]}")
    P = {}
    for name, shape, _ in specs:
        dt, shp, b = raw[name]
        if tuple(shp) != shape:
            raise RefError(f"{path}: tensor {name} has shape {shp}, config implies {list(shape)}")
        P[name] = to_tensor(dt, shp, b).to(dtype)
    return P


# ----------------------------------------------------------------------------- data
def read_tokens(path):
    """llm.c shard: 256 int32 header (magic 20240520, version 1, count), then uint16 tokens."""
    with open(path, "rb") as f:
        head = f.read(1024)
        if len(head) != 1024:
            raise RefError(f"{path}: short header")
        magic, version, n = struct.unpack_from("<3i", head)
        if magic != 20240520 or version != 1:
            raise RefError(f"{path}: bad magic/version {magic}/{version}")
        data = f.read(2 * n)
    if len(data) != 2 * n:
        raise RefError(f"{path}: header says {n} tokens, file has {len(data) // 2}")
    return torch.frombuffer(bytearray(data), dtype=torch.int16).to(torch.int64) & 0xFFFF


def window(tokens, i, B, T):
    n = (tokens.numel() - 1) // (B * T)
    if n < 1 or not 0 <= i < n:
        raise RefError(f"batch {i} out of range: {tokens.numel()} tokens hold {n} windows of {B}x{T}+1")
    w = tokens[i * B * T: i * B * T + B * T + 1]
    return w[:-1].view(B, T), w[1:].view(B, T)


# ----------------------------------------------------------------------------- commands
def emit(obj):
    print(json.dumps(obj), flush=True)


def route_by_token(c, named, dtype):
    """Weights whose routers send each token of the lower half of the vocabulary to experts 0..k-1
    of every MoE layer and each of the upper half to experts k..2k-1, by a wide margin: the
    residual stream's feature 0 is +10 or -10 by the token's half (the embedding's column 0; no
    attention output, expert or MLP writes it), the MoE layers' norm passes that feature only, and
    the router scores it +10, +9, ... for the first k experts and -10, -9, ... for the next k."""
    if not any(c.moe_layers) or c.num_experts < 2 * c.num_experts_per_tok:
        raise RefError("--route-by-token needs experts, at least twice the top k")
    P = dict(named)
    emb = P["model.embed_tokens.weight"]
    emb[:, 0] = 10.0
    emb[c.vocab_size // 2:, 0] = -10.0
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        P[p + "self_attn.o_proj.weight"][0] = 0.0
        for name in P:
            if name.startswith(p) and (name.endswith("down_proj.weight") or name.endswith(".w2.weight")):
                P[name][0] = 0.0
        if c.moe_layers[i]:
            norm = P[p + "post_attention_layernorm.weight"]
            norm.zero_()
            norm[0] = 1.0
            gate = P[p + c.moe_prefix + "gate.weight"]
            gate.zero_()
            for e in range(c.num_experts_per_tok):
                gate[e, 0] = 10.0 - e
                gate[c.num_experts_per_tok + e, 0] = -(10.0 - e)
    return [(name, P[name].to(dtype)) for name, _ in named]


def cmd_make(a):
    c = load_config(a.config)
    dtype = DT_TORCH[a.dtype]
    g = torch.Generator().manual_seed(a.seed)
    named = []
    for name, shape, kind in param_specs(c):
        # Matrices at std fan_in**-0.5 keep activations and logits O(1), so that an error
        # in any tensor moves the loss visibly; norm weights near 1, small biases.
        r = torch.randn(shape, generator=g)
        t = {"norm": 1.0 + 0.1 * r, "bias": 0.02 * r, "w": r * shape[-1] ** -0.5}[kind]
        named.append((name, t.to(dtype)))
    if a.route_by_token:
        named = route_by_token(c, named, dtype)
    K = a.shards
    if not 1 <= K <= len(named):
        raise RefError(f"--shards must be in 1..{len(named)}")
    os.makedirs(a.out, exist_ok=True)
    shutil.copyfile(a.config, os.path.join(a.out, "config.json"))
    with open(a.config) as f:
        raw = json.load(f)
    files = {"generation_config.json": {"bos_token_id": raw.get("bos_token_id", 1),
                                        "eos_token_id": raw.get("eos_token_id", 2), "_from_model_config": True},
             "tokenizer.json": {"version": "1.0", "model": {"type": "WordLevel", "vocab": {"<unk>": 0},
                                                            "unk_token": "<unk>"}, "placeholder": True},
             "tokenizer_config.json": {"tokenizer_class": "PreTrainedTokenizerFast", "placeholder": True}}
    for fn, obj in files.items():
        with open(os.path.join(a.out, fn), "w") as f:
            json.dump(obj, f, indent=2)
    sizes = [t.numel() * t.element_size() for _, t in named]
    total = sum(sizes)
    if K == 1:
        write_safetensors(os.path.join(a.out, "model.safetensors"), named)
    else:
        # Cut at byte quantiles, but force a cut whenever the tensors left only just
        # suffice to give every later file one, so that no file is empty.
        groups, acc = [[]], 0
        for i, (item, sz) in enumerate(zip(named, sizes)):
            groups[-1].append(item)
            acc += sz
            left, files_left = len(named) - i - 1, K - len(groups)
            if files_left and (acc >= total * len(groups) / K or left == files_left):
                groups.append([])
        wmap = {}
        for j, grp in enumerate(groups):
            fn = f"model-{j + 1:05d}-of-{K:05d}.safetensors"
            write_safetensors(os.path.join(a.out, fn), grp)
            wmap.update({name: fn for name, _ in grp})
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(wmap.items()))}, f, indent=2)
    emit({"tensors": len(named), "bytes": total})


def cmd_loss(a):
    c = load_config(os.path.join(a.model, "config.json"))
    P = load_params(a.model, c, torch.float32 if a.compute == "fp32" else torch.bfloat16)
    x, y = window(read_tokens(a.data), a.batch, a.rows, a.seq)
    with torch.no_grad():
        emit({"loss": forward_loss(c, P, x, y).item()})


def cmd_train(a):
    c = load_config(os.path.join(a.model, "config.json"))
    if getattr(c, "attention_dropout", 0.0):
        raise RefError("attention_dropout != 0 makes HF training random; not reproducible here")
    names = [n for n, _, _ in param_specs(c)]
    P = load_params(a.model, c, torch.float32)
    master = [P[n].requires_grad_() for n in names]  # fp32, owned by the optimizer
    if a.optimizer == "sgd":
        opt = torch.optim.SGD(master, lr=a.lr, weight_decay=a.weight_decay)
    else:
        opt = torch.optim.AdamW(master, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps, weight_decay=a.weight_decay)
    tokens = read_tokens(a.data)
    n_win = (tokens.numel() - 1) // (a.rows * a.seq)
    losses, norms = [], []
    for s in range(a.steps):
        x, y = window(tokens, s % max(n_win, 1), a.rows, a.seq)
        opt.zero_grad(set_to_none=True)
        if a.precision == "fp32":
            loss = forward_loss(c, P, x, y, a.chunks)
            loss.backward()
        else:
            # DeepSpeed bf16: forward/backward on bf16 copies of the fp32 master, bf16
            # grads upcast for the fp32 optimizer; the next step re-rounds the master.
            work = {n: P[n].detach().to(torch.bfloat16).requires_grad_() for n in names}
            loss = forward_loss(c, work, x, y, a.chunks)
            loss.backward()
            for n, m in zip(names, master):
                m.grad = work[n].grad.float() if work[n].grad is not None else None
        # An expert no token chose has no gradient here; DeepSpeed's flat buffers give it zeros,
        # which AdamW still steps on (its decay, its moments): zeros here too.
        for m in master:
            if m.grad is None:
                m.grad = torch.zeros_like(m)
        # Returns the pre-clip global L2 norm; with max_norm=inf it scales by exactly 1.
        norm = torch.nn.utils.clip_grad_norm_(master, a.clip if a.clip > 0 else float("inf"))
        opt.step()
        losses.append(loss.item())
        norms.append(norm.item())
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        shutil.copyfile(os.path.join(a.model, "config.json"), os.path.join(a.out, "config.json"))
        write_safetensors(os.path.join(a.out, "model.safetensors"), [(n, P[n].detach()) for n in names])
    emit({"losses": losses, "grad_norms": norms})


def cmd_sft(a):
    """Supervised fine-tuning on the whole of ROWS (ids and labels, -100 not learned) as one batch:
    each step's loss is the cross-entropy summed over every learned next token of every row, over
    their number (transformers' loss with num_items_in_batch across devices); SGD in fp32."""
    c = load_config(os.path.join(a.model, "config.json"))
    names = [n for n, _, _ in param_specs(c)]
    P = load_params(a.model, c, torch.float32)
    params = [P[n].requires_grad_() for n in names]
    opt = torch.optim.SGD(params, lr=a.lr)
    with open(a.rows) as f:
        rows = json.load(f)["rows"]
    losses = []
    for _ in range(a.steps):
        opt.zero_grad(set_to_none=True)
        total, count = 0.0, 0
        for r in rows:  # one row at a time: no padding
            ids = torch.tensor([r["ids"]], dtype=torch.int64)
            labels = torch.tensor(r["labels"][1:] + [-100], dtype=torch.int64)
            logits = forward_logits(c, P, ids).float()[0]
            total = total + F.cross_entropy(logits, labels, ignore_index=-100, reduction="sum")
            count += int((labels != -100).sum())
        loss = total / count
        loss.backward()
        opt.step()
        losses.append(loss.item())
    emit({"losses": losses})


def cmd_read(a):
    try:
        tensors, meta, files = read_model(a.path)
    except RefError as e:
        print(f"read: {e}", file=sys.stderr)
        emit({"ok": False, "error": str(e)})
        sys.exit(1)
    emit({"ok": True, "metadata": meta, "files": files,
          "tensors": {n: {"dtype": dt, "shape": shp, "sha256": hashlib.sha256(b).hexdigest()}
                      for n, (dt, shp, b) in sorted(tensors.items())}})


def cmd_compare(a):
    A, _, _ = read_model(a.a)
    B, _, _ = read_model(a.b)
    only_a, only_b = sorted(set(A) - set(B)), sorted(set(B) - set(A))
    worst, diff, shape_bad = None, 0.0, []
    for n in sorted(set(A) & set(B)):
        ta, tb = to_tensor(*A[n]).double(), to_tensor(*B[n]).double()
        if ta.shape != tb.shape:
            shape_bad.append(n)
            continue
        d = (ta - tb).abs().max().item() if ta.numel() else 0.0
        if worst is None or d > diff:
            worst, diff = n, d
    same = not only_a and not only_b
    emit({"same_names": same, "max_abs_diff": diff, "worst": worst, "only_in_a": only_a,
          "only_in_b": only_b, "shape_mismatch": shape_bad})
    if not same or shape_bad or diff > a.tol:
        sys.exit(1)


def cmd_batch(a):
    """Several subcommands in this one process: each line of JOBS is `OUTPUT COMMAND ARGS...`
    (shell words), and the command's JSON line goes to the file OUTPUT. Importing torch costs a
    process 1.4 s, and the Llama fixture runs 25 commands. Stops at the first that fails."""
    with open(a.jobs) as f:
        lines = f.read().splitlines()
    for number, line in enumerate(lines, 1):
        words = shlex.split(line)
        if not words:
            continue
        if len(words) < 2 or words[1] == "batch":
            raise RefError(f"{a.jobs}:{number}: expected OUTPUT COMMAND ARGS..., got '{line}'")
        with open(words[0], "w") as out, contextlib.redirect_stdout(out):
            status = run(words[1:])
        if status:
            raise RefError(f"{a.jobs}:{number}: '{line}' failed (status {status})")


def run(argv):
    """One subcommand; returns its exit status (argparse's and the commands' sys.exit included)."""
    ap = argparse.ArgumentParser(description="Reference HF Llama/Mistral/Qwen2 (eager) and safetensors tools.")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: reproducible sums)")
    sub = ap.add_subparsers(dest="cmd", required=True)

    def add(name, fn, positional, **flags):
        p = sub.add_parser(name)
        p.set_defaults(fn=fn)
        for x in positional:
            p.add_argument(x)
        for flag, kw in flags.items():
            p.add_argument("--" + flag.replace("_", "-"), **kw)

    req_int, req_float = dict(required=True, type=int), dict(required=True, type=float)
    data = dict(data=dict(required=True), rows=req_int, seq=req_int)
    add("make", cmd_make, ["out"], config=dict(required=True), seed=req_int,
        dtype=dict(choices=["F32", "BF16", "F16"], default="F32"), shards=dict(type=int, default=1),
        route_by_token=dict(action="store_true"))
    add("sft", cmd_sft, ["model"], rows=dict(required=True), steps=dict(type=int, default=3),
        lr=dict(type=float, default=0.1))
    add("loss", cmd_loss, ["model"], **data, batch=dict(type=int, default=0),
        compute=dict(choices=["fp32", "bf16"], default="fp32"))
    add("train", cmd_train, ["model"], **data, steps=req_int, lr=req_float,
        optimizer=dict(required=True, choices=["sgd", "adamw"]), weight_decay=dict(type=float, default=0.0),
        beta1=dict(type=float, default=0.9), beta2=dict(type=float, default=0.999),
        eps=dict(type=float, default=1e-8), clip=dict(type=float, default=0.0),
        precision=dict(choices=["fp32", "bf16"], default="fp32"), out=dict(default=None),
        chunks=dict(type=int, default=1))
    add("read", cmd_read, ["path"])
    add("compare", cmd_compare, ["a", "b"], tol=dict(type=float, default=0.0))
    add("batch", cmd_batch, ["jobs"])
    try:
        a = ap.parse_args(argv)
        torch.set_num_threads(a.threads)
        a.fn(a)
    except RefError as e:
        print(f"{a.cmd}: {e}", file=sys.stderr)
        return 1
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))

#!/usr/bin/env python3
"""A Llama-style decoder in plain PyTorch, randomly initialised from a fixed seed, with a KV pool whose
per-layer K and V of one request are contiguous tensors (so they can be handed to libpdshim as segments).

    cfg = llama.CONFIGS["tiny"]
    model = llama.Llama(cfg, device="cpu")               # fp32 on the CPU, bf16 on CUDA
    pool = llama.KVPool(cfg, slots=2, max_len=256, device="cpu", dtype=model.dtype)
    first = model.prefill(ids, pool, slot=0)            # fills pool slot 0, returns the first token (argmax)
    nxt = model.decode_step(first, len(ids), pool, 0)   # one greedy step at position len(ids)

Architecture (the transformers LlamaForCausalLM computation): token embedding; per layer RMSNorm ->
grouped-query attention with rotary position embeddings (rotate-half form, theta 10000) through
torch.nn.functional.scaled_dot_product_attention -> residual, RMSNorm -> SwiGLU MLP -> residual; final
RMSNorm; untied LM head. No biases.

Weights: every tensor is drawn on the CPU from its own torch.Generator seeded with (seed, tensor index)
(Mersenne Twister, the CPU generator: the same numbers in every process, on every machine and for every
device), in fp32, then cast to the model dtype and copied to the device. So two processes that build
the same config with the same seed hold bit-identical weights, whatever GPU they use and in whatever
order they run. (A CUDA generator would also repeat itself, but only for the same device kind and
library version; the CPU path removes that question.)

`python3 llama.py --check [--config tiny] [--device cpu]` compares the logits with transformers'
LlamaForCausalLM loaded with the same weights (fp32 on both sides; skipped with a message when
transformers is not importable) and prints one JSON line.
"""

import argparse
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Config:
    name: str
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    mlp: int
    rope_theta: float = 10000.0
    eps: float = 1e-5
    seed: int = 20261201

    def params(self):
        attn = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        mlp = 3 * self.hidden * self.mlp
        return 2 * self.vocab * self.hidden + self.layers * (attn + mlp + 2 * self.hidden) + self.hidden

    def kv_bytes_per_token(self, elem_size):
        return self.layers * 2 * self.kv_heads * self.head_dim * elem_size


CONFIGS = {
    # ~1.1B parameters; 8192 tokens of KV = 16 x 2 x 8192 x 8 x 64 x 2 B = 256 MiB in bf16.
    "1b": Config("1b", vocab=32000, hidden=2048, layers=16, heads=32, kv_heads=8, head_dim=64, mlp=8192),
    # For the CPU: the same shape of computation, small enough for a test.
    "tiny": Config("tiny", vocab=512, hidden=64, layers=4, heads=4, kv_heads=2, head_dim=16, mlp=128),
}


def weight_shapes(cfg):
    """(name, shape, kind) in a fixed order; names are transformers' LlamaForCausalLM state-dict keys."""
    out = [("model.embed_tokens.weight", (cfg.vocab, cfg.hidden), "linear")]
    q, kv = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    for i in range(cfg.layers):
        p = "model.layers.%d." % i
        out += [
            (p + "input_layernorm.weight", (cfg.hidden,), "norm"),
            (p + "self_attn.q_proj.weight", (q, cfg.hidden), "linear"),
            (p + "self_attn.k_proj.weight", (kv, cfg.hidden), "linear"),
            (p + "self_attn.v_proj.weight", (kv, cfg.hidden), "linear"),
            (p + "self_attn.o_proj.weight", (cfg.hidden, q), "linear"),
            (p + "post_attention_layernorm.weight", (cfg.hidden,), "norm"),
            (p + "mlp.gate_proj.weight", (cfg.mlp, cfg.hidden), "linear"),
            (p + "mlp.up_proj.weight", (cfg.mlp, cfg.hidden), "linear"),
            (p + "mlp.down_proj.weight", (cfg.hidden, cfg.mlp), "linear"),
        ]
    out += [("model.norm.weight", (cfg.hidden,), "norm"), ("lm_head.weight", (cfg.vocab, cfg.hidden), "linear")]
    return out


def _draw(cfg, idx, shape, kind):
    g = torch.Generator(device="cpu")
    g.manual_seed(cfg.seed * 1000003 + idx)
    t = torch.randn(shape, generator=g, dtype=torch.float32)
    if kind == "norm":
        return 1.0 + 0.1 * t  # not all ones, so that a missed norm weight shows
    return t * 0.02  # transformers' initializer_range


def make_weights(cfg, device, dtype, threads=None):
    """The seeded weights as a dict name -> tensor on device (see the module comment). Tensors are drawn
    on a thread pool (each from its own generator, so the order of the threads does not matter; the
    1.1B normal draws take ~40 s on one core)."""
    from concurrent.futures import ThreadPoolExecutor
    shapes = weight_shapes(cfg)
    n = threads or min(16, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=n) as ex:
        futs = [ex.submit(_draw, cfg, idx, shape, kind) for idx, (_, shape, kind) in enumerate(shapes)]
        w = {}
        for (name, _, _), f in zip(shapes, futs):
            w[name] = f.result().to(dtype).to(device)
    return w


class KVPool:
    """slots x layers x {K, V} x max_len x kv_heads x head_dim in one tensor, plus a small int64 tensor
    per slot (the first token id travels there). pool.k(slot, layer) is [max_len, kv_heads, head_dim],
    contiguous; its first n rows are a contiguous prefix."""

    def __init__(self, cfg, slots, max_len, device, dtype):
        self.cfg, self.slots, self.max_len = cfg, slots, max_len
        # One allocation holds both (one region to register, whose base is its own cudaMalloc block).
        shape = (slots, cfg.layers, 2, max_len, cfg.kv_heads, cfg.head_dim)
        kv = slots * cfg.layers * 2 * max_len * cfg.kv_heads * cfg.head_dim * torch.tensor([], dtype=dtype).element_size()
        self.buf = torch.zeros(kv + slots * 64, dtype=torch.uint8, device=device)
        self.data = self.buf[:kv].view(dtype).view(shape)
        self.meta = self.buf[kv:].view(torch.int64).view(slots, 8)

    def k(self, slot, layer):
        return self.data[slot, layer, 0]

    def v(self, slot, layer):
        return self.data[slot, layer, 1]

    def layer_bytes(self, n):
        """Bytes of one layer's K (or V) for n tokens."""
        return n * self.cfg.kv_heads * self.cfg.head_dim * self.data.element_size()

    def room_bytes(self, n):
        return self.cfg.layers * 2 * self.layer_bytes(n) + 8

    def layer_segments(self, slot, layer, n):
        """(address, length) of layer's K then V for the first n tokens."""
        b = self.layer_bytes(n)
        return [(self.k(slot, layer).data_ptr(), b), (self.v(slot, layer).data_ptr(), b)]

    def token_segment(self, slot):
        return (self.meta[slot].data_ptr(), 8)

    def segments(self, slot, n):
        """The room's byte space: layer 0 K, layer 0 V, layer 1 K, ..., then the first token (8 bytes)."""
        segs = []
        for layer in range(self.cfg.layers):
            segs += self.layer_segments(slot, layer, n)
        return segs + [self.token_segment(slot)]

    def room_parts(self, slot, n):
        """The room's byte space as streamed parts: [(offset, segments)], one part per layer (its K then
        V), then the first token; together exactly segments(slot, n), each byte once."""
        lb, out = self.layer_bytes(n), []
        for layer in range(self.cfg.layers):
            out.append((layer * 2 * lb, self.layer_segments(slot, layer, n)))
        return out + [(self.cfg.layers * 2 * lb, [self.token_segment(slot)])]

    @torch.inference_mode()
    def room_checksum(self, slot, n):
        """An integer digest of the room's bytes (every layer's K, V rows 0..n-1 and the first token), to
        compare what the prefill offered with what the decode received: each 16-bit (32-bit in fp32) word
        times a weight from its position and tensor, summed in int64 on the device (wrapping), one sync."""
        acc = torch.zeros((), dtype=torch.int64, device=self.data.device)
        word = torch.int16 if self.data.element_size() == 2 else torch.int32
        i = 0
        for layer in range(self.cfg.layers):
            for t in (self.k(slot, layer)[:n], self.v(slot, layer)[:n]):
                x = t.reshape(-1).view(word).to(torch.int64)
                i += 1
                w = torch.arange(1, x.numel() + 1, device=x.device, dtype=torch.int64) % 65521 + i * 7919
                acc += (x * w).sum()
        acc += self.meta[slot, 0] * 1000003
        return int(acc.item())

    def regions(self):
        """(address, length) of the memory that segments point into (to register with the shim)."""
        return [(self.buf.data_ptr(), self.buf.numel())]


def rms_norm(x, w, eps):
    dt = x.dtype
    x32 = x.to(torch.float32)
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return w * x32.to(dt)


def _sdpa_fallback(q, k, v, is_causal=False):
    """The math of scaled_dot_product_attention, for PyTorch older than 2.0 (development machines only:
    the GPU run uses the real one, and the script prints which)."""
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if is_causal:
        T, S = q.shape[-2], k.shape[-2]
        mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


sdpa = getattr(F, "scaled_dot_product_attention", None) or _sdpa_fallback
SDPA_NAME = "torch.nn.functional.scaled_dot_product_attention" if sdpa is not _sdpa_fallback else "fallback (torch < 2.0)"


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Llama:
    def __init__(self, cfg, device="cpu", dtype=None):
        self.cfg = cfg
        self.device = torch.device(device)
        if dtype is None:
            dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        self.dtype = dtype
        if self.device.type == "cuda" and hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
            # Measured on an H200 (PyTorch 2.11, CUDA 13): the cuDNN attention kernel, which
            # scaled_dot_product_attention picks by default for the one-token decode step, is not
            # repeatable: the same 2048-token prompt gave different greedy tokens run to run (first
            # difference at token 8 to 39 of 40), and no two processes agreed. Flash, memory-efficient and
            # math attention were each repeatable, flash identical across processes. Equality between a
            # disaggregated and a monolithic run needs repeatable numerics, so cuDNN's is turned off.
            torch.backends.cuda.enable_cudnn_sdp(False)
        self.w = make_weights(cfg, self.device, dtype)
        self.inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float32) / cfg.head_dim))
        self.inv_freq = self.inv_freq.to(self.device)

    def rope(self, positions):
        """cos, sin of shape [T, 1, head_dim] in the model dtype (computed in fp32, as transformers does)."""
        f = positions.to(torch.float32)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((f, f), dim=-1)
        return emb.cos().to(self.dtype)[:, None, :], emb.sin().to(self.dtype)[:, None, :]

    def _layer(self, i, x, pos0, k_cache, v_cache, causal, on_kv=None):
        """One decoder layer on x [T, hidden] at positions pos0..pos0+T-1; writes K, V into the caches
        (rows pos0..) and attends over rows 0..pos0+T-1. on_kv(i), when given, is called as soon as the
        K, V writes are queued, before the layer's attention and MLP: a streamed prefill publishes the
        layer's KV while the rest of the layer computes."""
        cfg, w, p = self.cfg, self.w, "model.layers.%d." % i
        T = x.shape[0]
        h = rms_norm(x, w[p + "input_layernorm.weight"], cfg.eps)
        q = F.linear(h, w[p + "self_attn.q_proj.weight"]).view(T, cfg.heads, cfg.head_dim)
        k = F.linear(h, w[p + "self_attn.k_proj.weight"]).view(T, cfg.kv_heads, cfg.head_dim)
        v = F.linear(h, w[p + "self_attn.v_proj.weight"]).view(T, cfg.kv_heads, cfg.head_dim)
        cos, sin = self.rope(torch.arange(pos0, pos0 + T, device=self.device))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k_cache[pos0:pos0 + T] = k
        v_cache[pos0:pos0 + T] = v
        if on_kv is not None:
            on_kv(i)
        S = pos0 + T
        rep = cfg.heads // cfg.kv_heads
        kk = k_cache[:S].transpose(0, 1).repeat_interleave(rep, dim=0)[None]  # [1, heads, S, D]
        vv = v_cache[:S].transpose(0, 1).repeat_interleave(rep, dim=0)[None]
        qq = q.transpose(0, 1)[None]  # [1, heads, T, D]
        a = sdpa(qq, kk, vv, is_causal=causal)
        a = a[0].transpose(0, 1).reshape(T, cfg.heads * cfg.head_dim)
        x = x + F.linear(a, w[p + "self_attn.o_proj.weight"])
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], cfg.eps)
        g = F.silu(F.linear(h, w[p + "mlp.gate_proj.weight"])) * F.linear(h, w[p + "mlp.up_proj.weight"])
        return x + F.linear(g, w[p + "mlp.down_proj.weight"])

    def _logits(self, x):
        return F.linear(rms_norm(x, self.w["model.norm.weight"], self.cfg.eps), self.w["lm_head.weight"])

    @torch.inference_mode()
    def prefill(self, ids, pool, slot, on_layer=None):
        """Runs the prompt from position 0, filling pool slot `slot` rows 0..len(ids)-1 of every layer.
        on_layer(i), when given, is called once layer i's K and V writes are queued on the device (before
        that layer's attention and MLP).
        Stores the first token in pool.meta[slot][0] and returns it (greedy argmax)."""
        n = len(ids)
        if n < 1 or n > pool.max_len:
            raise ValueError("prompt of %d tokens does not fit a cache of %d" % (n, pool.max_len))
        x = self.w["model.embed_tokens.weight"][torch.tensor(ids, dtype=torch.long, device=self.device)]
        for i in range(self.cfg.layers):
            x = self._layer(i, x, 0, pool.k(slot, i), pool.v(slot, i), causal=n > 1, on_kv=on_layer)
        tok = self._logits(x[-1:]).argmax(-1)
        pool.meta[slot, 0] = tok[0]
        return int(tok[0].item())

    @torch.inference_mode()
    def decode_step(self, token, pos, pool, slot):
        """Feeds token at position pos (the cache holds rows 0..pos-1) and returns the next (argmax)."""
        if pos >= pool.max_len:
            raise ValueError("position %d is past the cache (%d)" % (pos, pool.max_len))
        x = self.w["model.embed_tokens.weight"][torch.tensor([token], dtype=torch.long, device=self.device)]
        for i in range(self.cfg.layers):
            x = self._layer(i, x, pos, pool.k(slot, i), pool.v(slot, i), causal=False)
        return int(self._logits(x).argmax(-1)[0].item())

    @torch.inference_mode()
    def all_logits(self, ids):
        """Logits for every position of ids (fp32 result), through a scratch cache."""
        pool = KVPool(self.cfg, 1, len(ids), self.device, self.dtype)
        x = self.w["model.embed_tokens.weight"][torch.tensor(ids, dtype=torch.long, device=self.device)]
        for i in range(self.cfg.layers):
            x = self._layer(i, x, 0, pool.k(0, i), pool.v(0, i), causal=len(ids) > 1)
        return self._logits(x).to(torch.float32)

    def generate(self, ids, max_new_tokens, pool, slot=0):
        """Greedy tokens of a monolithic run: the prefill's first token, then decode steps."""
        if max_new_tokens <= 0:
            return []
        out = [self.prefill(ids, pool, slot)]
        while len(out) < max_new_tokens:
            out.append(self.decode_step(out[-1], len(ids) + len(out) - 1, pool, slot))
        return out


def prompt_ids(cfg, length, index, seed=7):
    """A deterministic random prompt (token ids in [0, vocab)) for (length, index)."""
    g = torch.Generator(device="cpu")
    g.manual_seed(seed * 1000003 + length * 1009 + index)
    return torch.randint(0, cfg.vocab, (length,), generator=g).tolist()


# Tolerance of the transformers comparison (fp32 on both sides): the largest absolute logit difference
# over all positions may be at most 1e-3 of the largest absolute logit (both compute the same operations
# in a different order; fp32 rounding stays near 1e-6 relative), and every position's argmax must agree.
HF_REL_TOL = 1e-3


def check_transformers(cfg, device, n_tokens=16):
    """Compares our logits with transformers' LlamaForCausalLM on the same weights. Returns a dict."""
    try:
        import transformers
        from transformers import LlamaConfig, LlamaForCausalLM
    except Exception as e:  # ImportError, or a broken install
        return {"check": "transformers", "skipped": True, "reason": "transformers not importable: %s" % e}
    t0 = time.monotonic()
    try:  # full fp32 matmuls on both sides (TF32 would round to ~1e-3 and blur the comparison)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    except AttributeError:
        pass
    ours = Llama(cfg, device=device, dtype=torch.float32)
    kw = dict(vocab_size=cfg.vocab, hidden_size=cfg.hidden, intermediate_size=cfg.mlp,
              num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads, num_key_value_heads=cfg.kv_heads,
              head_dim=cfg.head_dim, rms_norm_eps=cfg.eps, max_position_embeddings=max(4096, n_tokens),
              tie_word_embeddings=False, attention_bias=False, mlp_bias=False, hidden_act="silu")
    hcfg = LlamaConfig(**kw)
    # rope theta: transformers 4.x has rope_theta, 5.x a rope_parameters dict; both default to 10000.
    theta = getattr(hcfg, "rope_theta", None)
    rp = getattr(hcfg, "rope_parameters", None)
    if isinstance(rp, dict) and "rope_theta" in rp:
        theta = rp["rope_theta"]
    if theta is not None and float(theta) != cfg.rope_theta:
        return {"check": "transformers", "ok": False, "reason": "transformers rope theta %s != %s" % (theta, cfg.rope_theta)}
    try:
        with torch.device(device):  # built where it runs (PyTorch >= 2.0), not initialised on the CPU first
            hf = LlamaForCausalLM(hcfg)
    except (AttributeError, TypeError):
        hf = LlamaForCausalLM(hcfg)
    hf = hf.to(device=device, dtype=torch.float32).eval()
    missing, unexpected = hf.load_state_dict({k: v.to(torch.float32) for k, v in ours.w.items()}, strict=False)
    missing = [m for m in missing if "rotary_emb" not in m]
    if missing or unexpected:
        return {"check": "transformers", "ok": False, "reason": "state dict mismatch: missing %s unexpected %s"
                % (missing[:5], unexpected[:5])}
    ids = prompt_ids(cfg, n_tokens, 999)
    with torch.inference_mode():
        ref = hf(torch.tensor([ids], device=device)).logits[0].to(torch.float32)
    got = ours.all_logits(ids)
    diff = (ref - got).abs().max().item()
    scale = ref.abs().max().item()
    argmax_same = bool(torch.equal(ref.argmax(-1), got.argmax(-1)))
    ok = diff <= HF_REL_TOL * max(scale, 1e-6) and argmax_same
    return {"check": "transformers", "ok": ok, "transformers": transformers.__version__, "tokens": n_tokens,
            "max_abs_diff": diff, "max_abs_logit": scale, "rel_tol": HF_REL_TOL, "argmax_same": argmax_same,
            "seconds": round(time.monotonic() - t0, 2)}


def selftest(cfg, device):
    """Checks the properties the disaggregated run relies on; returns a dict with "ok"."""
    out, ok = {"check": "selftest"}, True
    a, b = make_weights(cfg, "cpu", torch.float32), make_weights(cfg, "cpu", torch.float32, threads=1)
    out["weights_identical"] = all(torch.equal(a[k], b[k]) for k in a)  # any thread order, any run
    model = Llama(cfg, device=device)
    pool = KVPool(cfg, 2, 96, device, model.dtype)
    segs = pool.segments(1, 40)
    parts = pool.room_parts(1, 40)
    flat, off = [], 0
    for o, ss in parts:
        out.setdefault("parts_contiguous", True)
        if o != off:
            out["parts_contiguous"] = False
        flat += ss
        off += sum(length for _, length in ss)
    out["parts_equal_segments"] = flat == segs and off == pool.room_bytes(40)
    ids = prompt_ids(cfg, 40, 0)
    ref = model.generate(ids, 6, pool, 0)
    # A second slot filled by copying only the room's bytes (what the transfer moves) continues the same.
    first = model.prefill(ids, pool, 1)
    pool.data[0].zero_()
    for l in range(cfg.layers):
        pool.k(0, l)[:40] = pool.k(1, l)[:40]
        pool.v(0, l)[:40] = pool.v(1, l)[:40]
    got = [first]
    while len(got) < 6:
        got.append(model.decode_step(got[-1], 40 + len(got) - 1, pool, 0))
    out["room_bytes_suffice"] = got == ref
    # And the decode really reads them: another prompt's KV under the same first token changes the output.
    model.prefill(prompt_ids(cfg, 40, 1), pool, 0)
    other = [first]
    while len(other) < 6:
        other.append(model.decode_step(other[-1], 40 + len(other) - 1, pool, 0))
    out["output_depends_on_kv"] = other != ref
    out["tokens"] = ref
    ok = out["weights_identical"] and out["parts_contiguous"] and out["parts_equal_segments"] and out["room_bytes_suffice"]
    ok = ok and out["output_depends_on_kv"]
    out["ok"] = bool(ok)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="compare with transformers' LlamaForCausalLM")
    ap.add_argument("--selftest", action="store_true", help="weights repeatable, room layout, room bytes suffice")
    ap.add_argument("--config", default="tiny", choices=sorted(CONFIGS))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tokens", type=int, default=16)
    a = ap.parse_args()
    cfg = CONFIGS[a.config]
    if a.selftest:
        r = selftest(CONFIGS["tiny"], a.device)
        print(json.dumps(r), flush=True)
        return 0 if r["ok"] else 1
    if a.check:
        r = check_transformers(cfg, a.device, a.tokens)
        r.update(config=a.config, device=a.device)
        print(json.dumps(r), flush=True)
        return 0 if r.get("ok") or r.get("skipped") else 1
    print(json.dumps(dict(asdict(cfg), params=cfg.params(), attention=SDPA_NAME, torch=torch.__version__)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

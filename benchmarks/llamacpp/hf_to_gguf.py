#!/usr/bin/env python3
"""Pure-stdlib converter: a flywheel / Hugging Face Qwen2 model directory (config.json +
model.safetensors) -> GGUF v3 for llama.cpp's `qwen2` architecture.

  python3 hf_to_gguf.py MODEL_DIR OUT.gguf

Tensor data is copied byte for byte: F32 stays F32 (GGML type 0), BF16 stays BF16 (GGML type 30)
for 2-D weights. 1-D tensors (RMSNorm weights, q/k/v biases) of a BF16 checkpoint are widened to
F32 (exact: a bf16 value is the top 16 bits of the same float32), as llama.cpp's own
convert_hf_to_gguf.py does for MOSTLY_BF16 ("except 1d tensors").

The tokenizer is synthetic (the model has none): tokenizer.ggml.model = "gpt2" with
vocab_size distinct strings: ids 0..2 control tokens <|unk|>, <|bos|>, <|eos|> (ids from
config.json's bos/eos), the 256 GPT-2 byte-level characters next, then "<t12345>" fillers, an
empty merges list, add_bos_token = false. Benchmarks and the greedy check feed token ids
directly, so the tokenizer only has to load.
"""
import json
import os
import struct
import sys

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

# gguf value types
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY, \
    T_UINT64, T_INT64, T_FLOAT64 = range(13)

GGML_TYPE_F32 = 0
GGML_TYPE_BF16 = 30
LLAMA_FTYPE_ALL_F32 = 0
LLAMA_FTYPE_MOSTLY_BF16 = 32


def gguf_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def kv_bytes(key, vtype, value):
    out = gguf_str(key) + struct.pack("<I", vtype)
    if vtype == T_ARRAY:
        etype, items = value
        out += struct.pack("<IQ", etype, len(items))
        if etype == T_STRING:
            out += b"".join(gguf_str(x) for x in items)
        elif etype == T_INT32:
            out += struct.pack("<%di" % len(items), *items)
        elif etype == T_FLOAT32:
            out += struct.pack("<%df" % len(items), *items)
        else:
            raise ValueError("array type %d" % etype)
        return out
    if vtype == T_STRING:
        return out + gguf_str(value)
    fmt = {T_UINT32: "<I", T_INT32: "<i", T_FLOAT32: "<f", T_BOOL: "<?", T_UINT64: "<Q",
           T_UINT8: "<B"}[vtype]
    return out + struct.pack(fmt, value)


def bytes_to_unicode():
    """GPT-2's byte -> printable character map (what byte-level BPE vocabularies contain)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header, 8 + n


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")
    if parts[0] != "model" or parts[1] != "layers":
        raise ValueError("unexpected tensor " + hf)
    i = int(parts[2])
    rest = ".".join(parts[3:])
    m = {
        "input_layernorm.weight": "attn_norm.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.q_proj.bias": "attn_q.bias",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.k_proj.bias": "attn_k.bias",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.v_proj.bias": "attn_v.bias",
        "self_attn.o_proj.weight": "attn_output.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    if rest not in m:
        raise ValueError("unexpected tensor " + hf)
    return "blk.%d.%s" % (i, m[rest])


def bf16_to_f32_bytes(raw):
    # each little-endian bf16 (2 bytes) becomes float32 with those bytes as its high half
    out = bytearray(len(raw) * 2)
    out[2::4] = raw[0::2]
    out[3::4] = raw[1::2]
    return bytes(out)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    model_dir, out_path = sys.argv[1], sys.argv[2]
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    if cfg.get("model_type") != "qwen2":
        sys.exit("only model_type qwen2 is supported, got %r" % cfg.get("model_type"))
    if cfg.get("use_sliding_window"):
        sys.exit("sliding-window attention is not supported")
    st_path = os.path.join(model_dir, "model.safetensors")
    header, data_base = read_safetensors(st_path)

    dtypes = {v["dtype"] for v in header.values()}
    if dtypes == {"F32"}:
        ftype = LLAMA_FTYPE_ALL_F32
    elif dtypes == {"BF16"}:
        ftype = LLAMA_FTYPE_MOSTLY_BF16
    else:
        sys.exit("unsupported dtypes %s (F32 or BF16 only)" % sorted(dtypes))

    n_vocab = cfg["vocab_size"]
    hidden = cfg["hidden_size"]
    n_head = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim", hidden // n_head)
    if head_dim * n_head != hidden:
        sys.exit("qwen2 in llama.cpp needs head_dim * heads == hidden_size")
    bos = cfg.get("bos_token_id", 1)
    eos = cfg.get("eos_token_id", 2)
    if isinstance(eos, list):
        eos = eos[0]

    # --- tokenizer: distinct strings, byte-level characters first so text still encodes
    tokens = [None] * n_vocab
    types = [1] * n_vocab  # 1 = normal
    specials = {0: "<|unk|>", bos: "<|bos|>", eos: "<|eos|>"}
    for i, s in specials.items():
        tokens[i] = s
        types[i] = 3  # control
    byte_chars = list(bytes_to_unicode().values())
    free = (i for i in range(n_vocab) if tokens[i] is None)
    for ch in byte_chars:
        tokens[next(free)] = ch
    for i in range(n_vocab):
        if tokens[i] is None:
            tokens[i] = "<t%d>" % i
    assert len(set(tokens)) == n_vocab

    kvs = [
        ("general.architecture", T_STRING, "qwen2"),
        ("general.type", T_STRING, "model"),
        ("general.name", T_STRING, os.path.basename(os.path.normpath(model_dir))),
        ("general.alignment", T_UINT32, ALIGNMENT),
        ("general.file_type", T_UINT32, ftype),
        ("qwen2.block_count", T_UINT32, cfg["num_hidden_layers"]),
        ("qwen2.context_length", T_UINT32, cfg["max_position_embeddings"]),
        ("qwen2.embedding_length", T_UINT32, hidden),
        ("qwen2.feed_forward_length", T_UINT32, cfg["intermediate_size"]),
        ("qwen2.attention.head_count", T_UINT32, n_head),
        ("qwen2.attention.head_count_kv", T_UINT32, cfg.get("num_key_value_heads", n_head)),
        ("qwen2.rope.freq_base", T_FLOAT32, float(cfg.get("rope_theta", 10000.0))),
        ("qwen2.attention.layer_norm_rms_epsilon", T_FLOAT32, float(cfg.get("rms_norm_eps", 1e-6))),
        ("qwen2.vocab_size", T_UINT32, n_vocab),
        ("tokenizer.ggml.model", T_STRING, "gpt2"),
        ("tokenizer.ggml.pre", T_STRING, "default"),
        ("tokenizer.ggml.tokens", T_ARRAY, (T_STRING, tokens)),
        ("tokenizer.ggml.token_type", T_ARRAY, (T_INT32, types)),
        ("tokenizer.ggml.merges", T_ARRAY, (T_STRING, [])),
        ("tokenizer.ggml.bos_token_id", T_UINT32, bos),
        ("tokenizer.ggml.eos_token_id", T_UINT32, eos),
        ("tokenizer.ggml.add_bos_token", T_BOOL, False),
        ("tokenizer.ggml.add_eos_token", T_BOOL, False),
    ]
    if cfg.get("rope_scaling"):
        sys.exit("rope_scaling is not supported by this converter")

    # --- tensors: order as llama.cpp's converter (embeddings, layers, norm, output)
    def order_key(name):
        g = gguf_name(name)
        if g.startswith("token_embd"):
            return (0, 0, g)
        if g.startswith("blk."):
            return (1, int(g.split(".")[1]), g)
        return (2, 0 if g.startswith("output_norm") else 1, g)

    names = sorted(header, key=order_key)
    if "lm_head.weight" not in header and not cfg.get("tie_word_embeddings"):
        sys.exit("no lm_head.weight and tie_word_embeddings is false")
    plan = []  # (gguf name, dims innermost-first, ggml type, nbytes, hf name, widen)
    offset = 0
    for hf in names:
        t = header[hf]
        shape = t["shape"]
        begin, end = t["data_offsets"]
        nbytes = end - begin
        widen = t["dtype"] == "BF16" and len(shape) == 1
        if t["dtype"] == "F32" or widen:
            gtype = GGML_TYPE_F32
            out_bytes = nbytes * 2 if widen else nbytes
        else:
            gtype = GGML_TYPE_BF16
            out_bytes = nbytes
        n = 1
        for d in shape:
            n *= d
        assert n * (4 if gtype == GGML_TYPE_F32 else 2) == out_bytes, hf
        plan.append((gguf_name(hf), list(reversed(shape)), gtype, out_bytes, offset, hf, widen))
        offset += (out_bytes + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT

    head = bytearray()
    head += GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(plan), len(kvs))
    for key, vtype, value in kvs:
        head += kv_bytes(key, vtype, value)
    for name, dims, gtype, _, off, _, _ in plan:
        head += gguf_str(name) + struct.pack("<I", len(dims))
        head += struct.pack("<%dQ" % len(dims), *dims)
        head += struct.pack("<IQ", gtype, off)
    head += b"\0" * ((-len(head)) % ALIGNMENT)

    tmp = out_path + ".tmp"
    with open(st_path, "rb") as src, open(tmp, "wb") as dst:
        dst.write(head)
        written = 0
        for name, dims, gtype, out_bytes, off, hf, widen in plan:
            assert written == off
            begin, end = header[hf]["data_offsets"]
            src.seek(data_base + begin)
            raw = src.read(end - begin)
            if widen:
                raw = bf16_to_f32_bytes(raw)
            dst.write(raw)
            pad = (-len(raw)) % ALIGNMENT
            dst.write(b"\0" * pad)
            written += len(raw) + pad
    os.replace(tmp, out_path)
    print("wrote %s: %d tensors, %d KV, file_type %d, %.1f MiB" %
          (out_path, len(plan), len(kvs), ftype, os.path.getsize(out_path) / 2**20))


if __name__ == "__main__":
    main()

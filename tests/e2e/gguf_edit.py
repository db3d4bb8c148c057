"""Writes a copy of a GGUF file with metadata changed: a chat template set, tokens
added to the vocabulary. For tests that need a model with a template (the shared
models have none); the weights are copied unchanged.

Source: the GGUF specification (ggml/docs/gguf.md): header, typed key-value pairs,
tensor infos, then tensor data at the next multiple of general.alignment (default 32),
tensor offsets relative to that start. Standard library only.
"""
import struct

# Value types of the GGUF specification.
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
_SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?",
           U64: "<Q", I64: "<q", F64: "<d"}
# Token types (llama.cpp's llama_token_type).
NORMAL, CONTROL, USER_DEFINED = 1, 3, 4


class _Reader:
    def __init__(self, data):
        self.data, self.at = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.data, self.at)[0]
        self.at += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.data[self.at:self.at + n]
        self.at += n
        return s.decode("utf-8")

    def value(self, t):
        if t == STRING:
            return self.string()
        if t == ARRAY:
            et, n = self.take("<I"), self.take("<Q")
            return (et, [self.value(et) for _ in range(n)])
        return self.take(_SCALAR[t])


def _string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(t, v):
    if t == STRING:
        return _string(v)
    if t == ARRAY:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(_value(et, x) for x in items)
    return struct.pack(_SCALAR[t], v)


def edit(src, dst, chat_template=None, add_tokens=(), set_kv=None, replace_tokens=None):
    """Copies GGUF `src` to `dst`, setting tokenizer.chat_template to `chat_template`
    (when given), appending `add_tokens`, (text, token_type) pairs, to the vocabulary
    (score 0), giving each token whose text is a key of `replace_tokens` the (text,
    token_type) it maps to (the model then writes the new text where it wrote the old),
    and setting each key of `set_kv` to its (type, value). Returns the new vocabulary size."""
    data = open(src, "rb").read()
    r = _Reader(data)
    assert data[:4] == b"GGUF", "not a GGUF file"
    r.at = 4
    version, n_tensors, n_kv = r.take("<I"), r.take("<Q"), r.take("<Q")
    assert version == 3, "only GGUF v3 is written"
    kvs = []
    for _ in range(n_kv):
        key = r.string()
        t = r.take("<I")
        kvs.append([key, t, r.value(t)])
    infos_at = r.at
    for _ in range(n_tensors):
        r.string()
        n_dims = r.take("<I")
        r.at += 8 * n_dims + 4 + 8
    infos = data[infos_at:r.at]
    kv = {k[0]: k for k in kvs}
    align = kv["general.alignment"][2] if "general.alignment" in kv else 32
    data_start = (r.at + align - 1) // align * align
    n_vocab = len(kv["tokenizer.ggml.tokens"][2][1])
    for old, (text, ttype) in (replace_tokens or {}).items():
        at = kv["tokenizer.ggml.tokens"][2][1].index(old)
        kv["tokenizer.ggml.tokens"][2][1][at] = text
        if "tokenizer.ggml.token_type" in kv:
            kv["tokenizer.ggml.token_type"][2][1][at] = ttype
    for text, ttype in add_tokens:
        kv["tokenizer.ggml.tokens"][2][1].append(text)
        if "tokenizer.ggml.scores" in kv:
            kv["tokenizer.ggml.scores"][2][1].append(0.0)
        if "tokenizer.ggml.token_type" in kv:
            kv["tokenizer.ggml.token_type"][2][1].append(ttype)
        n_vocab += 1
    if chat_template is not None:
        if "tokenizer.chat_template" in kv:
            kv["tokenizer.chat_template"][2] = chat_template
        else:
            kvs.append(["tokenizer.chat_template", STRING, chat_template])
    for key, (t, v) in (set_kv or {}).items():
        if key in kv:
            kv[key][1], kv[key][2] = t, v
        else:
            kvs.append([key, t, v])
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, n_tensors, len(kvs)))
    for key, t, v in kvs:
        out += _string(key) + struct.pack("<I", t) + _value(t, v)
    out += infos
    out += b"\0" * ((-len(out)) % align)
    out += data[data_start:]
    open(dst, "wb").write(out)
    return n_vocab
